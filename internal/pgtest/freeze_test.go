package pgtest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestFreezeStopsEveryProcess checks that once Freeze returns no process
// of the server runs, while clients keep connecting (so the postmaster is
// forking backends as it is stopped): every child of the postmaster is
// stopped, or has ended. Before Freeze waited for the stops, processes
// could still be running when it returned, and a backend the postmaster
// was still forking was never stopped (3 and 4 of 40 freezes in two runs
// here): it answered a frozen server's queries.
func TestFreezeStopsEveryProcess(t *testing.T) {
	srv := StartServer(t)
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop.Store(true)
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				if c, err := pgx.Connect(ctx, srv.URL); err == nil {
					_ = c.Close(ctx)
				}
				cancel()
			}
		})
	}
	for range 30 {
		thaw := srv.Freeze(t)
		children, err := childrenOf(srv.frozen[0])
		require.NoError(t, err)
		for _, pid := range children {
			state, err := stateOf(pid)
			if err != nil {
				continue // gone
			}
			require.Contains(t, []string{"T", "Z", "X"}, state, "process %d of the frozen server is running; %s", pid, srv.States())
		}
		thaw()
	}
}
