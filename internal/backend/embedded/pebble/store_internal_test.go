package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// quiet drops Pebble's start-up messages.
var quiet = slog.New(slog.DiscardHandler)

func openTest(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// queueKeys returns every raw key that belongs to queue qid or is named
// name in the catalog.
func queueKeys(t *testing.T, s *Store, qid uint64, name string) []string {
	t.Helper()
	iter, err := s.db.NewIter(nil)
	require.NoError(t, err)
	defer iter.Close()
	var out []string
	for iter.First(); iter.Valid(); iter.Next() {
		k := iter.Key()
		switch k[0] {
		case prefixCatalog:
			if string(k[1:]) == name {
				out = append(out, fmt.Sprintf("catalog %q", k[1:]))
			}
		case prefixLastID, prefixLegacy, prefixMeta, prefixBody, prefixErrors, prefixState, prefixDedup, prefixHeld:
			if binary.BigEndian.Uint64(k[1:9]) == qid {
				out = append(out, fmt.Sprintf("%x", k))
			}
		}
	}
	require.NoError(t, iter.Error())
	return out
}

func fill(t *testing.T, s *Store, qid uint64, n int) {
	t.Helper()
	b := &store.Batch{QueueID: qid, LastID: uint64(n)}
	for id := uint64(1); id <= uint64(n); id++ {
		m := queue.ItemMeta{ID: id, BodyID: id, CreatedAt: t0}
		b.Insert(int32(id%3), m, queue.ItemBody{Payload: []byte("p")}, queue.ItemErrors{LastError: "e"})
	}
	require.NoError(t, s.Write(t.Context(), b))
}

func TestDeleteQueueLeavesNoKeys(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := t.Context()
	a, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "a", Partitions: 3})
	require.NoError(t, err)
	b, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "b", Partitions: 3})
	require.NoError(t, err)
	fill(t, s, a.ID, 30)
	fill(t, s, b.ID, 30)
	for _, q := range []uint64{a.ID, b.ID} {
		hb := &store.Batch{QueueID: q}
		hb.HoldGroup(queue.HeldGroup{Partition: 1, Group: "g", DeadKey: "explicit:a~1", Seq: 1})
		require.NoError(t, s.Write(ctx, hb))
	}
	// 30 metas, bodies and errors, a held group, the LastID and the
	// catalog entry.
	require.Len(t, queueKeys(t, s, a.ID, "a"), 30*3+3)

	require.NoError(t, s.DeleteQueue(ctx, "a"))
	require.Empty(t, queueKeys(t, s, a.ID, "a"))
	require.Len(t, queueKeys(t, s, b.ID, "b"), 30*3+3)
}

// TestWriteRacingDeleteQueue checks that a Write concurrent with
// DeleteQueue either lands before the delete or fails, never leaving keys
// under the dead queue ID.
func TestWriteRacingDeleteQueue(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir(), Logger: quiet}) // sync off: more writes per delete
	require.NoError(t, err)
	defer s.Close()
	ctx := t.Context()
	for i := range 20 {
		name := fmt.Sprint("q", i)
		q, err := s.CreateQueue(ctx, queue.QueueInfo{Name: name, Partitions: 1})
		require.NoError(t, err)
		done := make(chan error)
		started := make(chan struct{})
		go func() {
			for id := uint64(1); ; id++ {
				b := &store.Batch{QueueID: q.ID, LastID: id}
				b.Insert(0, queue.ItemMeta{ID: id, BodyID: id}, queue.ItemBody{Payload: []byte("p")}, queue.ItemErrors{LastError: "e"})
				if err := s.Write(ctx, b); err != nil {
					done <- err
					return
				}
				if id == 10 {
					close(started)
				}
			}
		}()
		<-started
		require.NoError(t, s.DeleteQueue(ctx, name))
		require.ErrorIs(t, <-done, store.ErrQueueNotFound)
		require.Empty(t, queueKeys(t, s, q.ID, name))
	}
}

func TestWriteRejectsTimeOutOfRange(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := t.Context()
	q, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "q", Partitions: 1})
	require.NoError(t, err)
	b := &store.Batch{QueueID: q.ID, LastID: 2}
	b.Insert(0, queue.ItemMeta{ID: 1, BodyID: 1}, queue.ItemBody{}, queue.ItemErrors{})
	b.Insert(0, queue.ItemMeta{ID: 2, BodyID: 2, ExpireDeadline: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}, queue.ItemBody{}, queue.ItemErrors{})
	err = s.Write(ctx, b)
	require.ErrorIs(t, err, errTimeRange)
	require.ErrorContains(t, err, fmt.Sprintf("pebble: write queue %d: op 1 (item 2)", q.ID))
	last, err := s.LastID(ctx, q.ID)
	require.NoError(t, err)
	require.Zero(t, last)
	require.Equal(t, []string{`catalog "q"`}, queueKeys(t, s, q.ID, "q"))
}

func TestOpenErrors(t *testing.T) {
	_, err := Open(Config{})
	require.Error(t, err)

	// A directory in use.
	dir := t.TempDir()
	openTest(t, dir)
	_, err = Open(Config{Dir: dir, Logger: quiet})
	require.Error(t, err)

	// A Pebble database that is not a Styx store.
	dir = t.TempDir()
	db, err := pebbledb.Open(dir, &pebbledb.Options{})
	require.NoError(t, err)
	require.NoError(t, db.Set([]byte("x"), []byte("y"), pebbledb.Sync))
	require.NoError(t, db.Close())
	_, err = Open(Config{Dir: dir, Logger: quiet})
	require.ErrorContains(t, err, "not a Styx store")

	// Another format.
	dir = t.TempDir()
	db, err = pebbledb.Open(dir, &pebbledb.Options{})
	require.NoError(t, err)
	require.NoError(t, db.Set(formatKey, []byte("styx-store-99"), pebbledb.Sync))
	require.NoError(t, db.Close())
	_, err = Open(Config{Dir: dir, Logger: quiet})
	require.ErrorContains(t, err, "unknown store format")

	// A corrupt catalog entry fails Open with the queue named.
	dir = t.TempDir()
	s, err := Open(Config{Dir: dir, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, s.db.Set(catalogKey("bad"), []byte{formatV1, 1}, pebbledb.Sync))
	require.NoError(t, s.Close())
	_, err = Open(Config{Dir: dir, Logger: quiet})
	require.ErrorIs(t, err, errCorrupt)
	require.ErrorContains(t, err, `queue "bad"`)
}

func TestCorruptMetaIsAnError(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := t.Context()
	q, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "q", Partitions: 1})
	require.NoError(t, err)
	fill(t, s, q.ID, 3)
	var kbuf [itemKeyLen]byte
	require.NoError(t, s.db.Set(itemKey(&kbuf, prefixMeta, q.ID, 0, 3), []byte{formatV1}, pebbledb.Sync))
	err = s.LoadItems(ctx, q.ID, 0, func(queue.ItemMeta) error { return nil })
	require.ErrorIs(t, err, errCorrupt)
	require.ErrorContains(t, err, fmt.Sprintf("pebble: load items of queue %d partition 0: item 3: meta", q.ID))
	_, err = s.ListItems(ctx, q.ID, 0, 0, 10)
	require.ErrorIs(t, err, errCorrupt)
}

func TestCorruptTaskIsAnError(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := t.Context()
	require.NoError(t, s.PutTask(ctx, store.TaskRecord{ID: "a", Queue: "q", Data: []byte("d")}))
	require.NoError(t, s.db.Set(taskKey("b"), []byte{formatV1, 5}, pebbledb.Sync))
	_, err := s.ListTasks(ctx)
	require.ErrorIs(t, err, errCorrupt)
	require.ErrorContains(t, err, `pebble: list tasks: task "b": task`)
	require.NoError(t, s.db.Set(taskKey("b"), []byte{9}, pebbledb.Sync))
	_, err = s.ListTasks(ctx)
	require.ErrorContains(t, err, "unknown format 9")
	require.NoError(t, s.DeleteTask(ctx, "b"))
	tasks, err := s.ListTasks(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.TaskRecord{{ID: "a", Queue: "q", Data: []byte("d")}}, tasks)
}

func TestTaskKeys(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := t.Context()
	require.NoError(t, s.PutTask(ctx, store.TaskRecord{ID: "t1", Queue: "q"}))
	v, err := s.get([]byte{prefixTask, 't', '1'})
	require.NoError(t, err)
	require.Equal(t, []byte{formatV1, 1, 'q', 0}, v)
}

func TestTaskIDLength(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := t.Context()
	require.Error(t, s.PutTask(ctx, store.TaskRecord{}), "empty id")
	long := strings.Repeat("x", maxTaskID+1)
	err := s.PutTask(ctx, store.TaskRecord{ID: long})
	require.ErrorContains(t, err, "task id of 129 bytes")
	require.NotContains(t, err.Error(), long)
	require.NoError(t, s.PutTask(ctx, store.TaskRecord{ID: long[1:]}))
	tasks, err := s.ListTasks(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.TaskRecord{{ID: long[1:]}}, tasks)
}

// TestCloseWaitsForCalls checks that Close waits for a call in progress
// instead of closing Pebble under it.
func TestCloseWaitsForCalls(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir(), Logger: quiet})
	require.NoError(t, err)
	ctx := t.Context()
	q, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "q", Partitions: 1})
	require.NoError(t, err)
	fill(t, s, q.ID, 3)

	inFn := make(chan struct{})
	release := make(chan struct{})
	loaded := make(chan error)
	go func() {
		first := true
		loaded <- s.LoadItems(ctx, q.ID, 0, func(queue.ItemMeta) error {
			if first {
				first = false
				close(inFn)
				<-release
			}
			return nil
		})
	}()
	<-inFn
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned during LoadItems: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	_, err = s.GetQueue(ctx, "q")
	require.ErrorIs(t, err, store.ErrClosed, "new calls fail while closing")
	close(release)
	require.NoError(t, <-loaded)
	require.NoError(t, <-closed)
}

func TestContextCancelled(t *testing.T) {
	s := openTest(t, t.TempDir())
	q, err := s.CreateQueue(t.Context(), queue.QueueInfo{Name: "q", Partitions: 1})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	b := &store.Batch{QueueID: q.ID, LastID: 1}
	err = s.Write(ctx, b)
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
	last, err := s.LastID(t.Context(), q.ID)
	require.NoError(t, err)
	require.Zero(t, last)
}
