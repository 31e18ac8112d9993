package service_test

import (
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestRestartAfterAFaultInClose (issue 41, point 7): a write fault in the
// store's own close (the last sync of its log, where seed 957 of
// TestWriteFaults once put it) fails that Close with the fault, if at all;
// a second Daemon.Close then returns the first's result at once (it
// blocked for ever), and the server restarted on the same files holds
// every acknowledged item.
func TestRestartAfterAFaultInClose(t *testing.T) {
	var armed, fired atomic.Bool
	inject := errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if armed.Load() && fired.CompareAndSwap(false, true) {
				return syscall.ENOSPC
			}
		}
		return nil
	})
	fs := errorfs.Wrap(vfs.NewMem(), inject)
	s := servertest.Start(t, pebbleOn(func() vfs.FS { return fs }, pebble.Config{MinFreeBytes: -1, CheckInterval: 10 * time.Millisecond}))
	s.CreateQueue(&pb.QueueInfo{QueueName: "q"})
	s.Produce("q", "a", "b", "c")

	d := s.D
	s.D = nil // stopped here, not by the test's cleanup
	s.C.Close()
	require.NoError(t, d.Close(ctx))
	armed.Store(true)
	err := s.Store.Close()
	require.True(t, fired.Load(), "the store's close wrote nothing")
	if err != nil {
		require.ErrorIs(t, err, syscall.ENOSPC, "the store's Close reports the fault, nothing else")
	}
	armed.Store(false)

	closed := make(chan error, 1)
	go func() { closed <- d.Close(ctx) }()
	select {
	case err := <-closed:
		require.NoError(t, err, "a second Close returns the first's result")
	case <-time.After(5 * time.Second):
		t.Fatal("a second Daemon.Close did not return within 5s")
	}

	s.Boot()
	require.ElementsMatch(t, []string{"a", "b", "c"}, payloads(s.Items("q")), "every acknowledged item after the restart")
}
