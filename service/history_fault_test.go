package service_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// historyWrites fails or passes the queue history's writes of a server
// (faulty.Store.SetHistoryHook) and remembers which minutes of queue q each
// failed attempt carried and which minutes the store has stored
// (faulty.Store.SetHistoryStored: a write that passed the hook can still be
// cancelled by a shutdown).
type historyWrites struct {
	q      string
	mu     sync.Mutex
	fail   bool
	failed map[time.Time]int // minute -> failed attempts that carried it
	stored map[time.Time]bool
}

func (h *historyWrites) hook(ms []store.HistoryMinute) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.fail {
		return nil
	}
	for _, m := range ms {
		if m.Queue == h.q {
			h.failed[m.At.UTC()]++
		}
	}
	return errors.New("history disk on fire")
}

func (h *historyWrites) written(ms []store.HistoryMinute) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range ms {
		if m.Queue == h.q {
			h.stored[m.At.UTC()] = true
		}
	}
}

func (h *historyWrites) setFail(fail bool) {
	h.mu.Lock()
	h.fail = fail
	h.mu.Unlock()
}

// failedWith reports whether a failed attempt carried minute.
func (h *historyWrites) failedWith(minute time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failed[minute] > 0
}

// storedAll reports whether the store has stored every minute.
func (h *historyWrites) storedAll(minutes ...time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range minutes {
		if !h.stored[m] {
			return false
		}
	}
	return true
}

// TestQueuesHistoryWriteFailure (ADR 0025): a failed write of the queue
// history never fails a request, is logged once until a write succeeds, and
// is retried while the minutes are in memory: once writes work again, the
// minutes written during the failure are stored, and a restart still shows
// them. The fault is the store's (faulty.Store.SetHistoryHook), so this runs
// on the embedded backends; the failure handling (history.Recorder's write)
// is the same code on PostgreSQL, only PutHistory differs. Time is the fake
// clock's.
func TestQueuesHistoryWriteFailure(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		if b.Postgres() {
			t.Skip("the fault is injected into the embedded backends' store (faulty.Store); the recorder's handling of a failed write is the same code on postgres")
		}
		s := servertest.StartFake(t, b)
		s.Clock.Set(s.Clock.Now().Truncate(time.Minute).Add(time.Minute + 10*time.Second))
		w := &historyWrites{q: "hwf", failed: map[time.Time]int{}, stored: map[time.Time]bool{}}
		w.setFail(true)
		s.Faults.SetHistoryHook(w.hook)
		s.Faults.SetHistoryStored(w.written)
		s.CreateQueue(&pb.QueueInfo{QueueName: "hwf"})
		m0 := s.Now().Truncate(time.Minute).UTC()
		m1, m2, m3 := m0.Add(time.Minute), m0.Add(2*time.Minute), m0.Add(3*time.Minute)

		// Minute 0: produce and complete answer as ever.
		s.Produce("hwf", "1", "2", "3")
		res := s.Lease("hwf", 2)
		require.Len(t, res.Items, 2)
		s.Complete("hwf", res.Partition, res.Items[0].Id, res.Items[1].Id)

		// Minute 1: its first produce starts a minute, so minute 0 is
		// written, and the write fails; requests go on.
		s.Advance(time.Minute)
		s.Produce("hwf", "4", "5")
		res = s.Lease("hwf", 1)
		require.Len(t, res.Items, 1)
		s.Complete("hwf", res.Partition, res.Items[0].Id)
		servertest.Eventually(t, func() bool { return w.failedWith(m0) }, "minute 0 should have been written (and failed)")

		// Minute 2: minutes 0 and 1 are written again, and fail again.
		s.Advance(time.Minute)
		s.Produce("hwf", "6")
		servertest.Eventually(t, func() bool { return w.failedWith(m1) }, "minute 1 should have been written (and failed)")
		w.mu.Lock()
		retried := w.failed[m0]
		w.mu.Unlock()
		assert.GreaterOrEqual(t, retried, 2, "minute 0 is retried at each flush while it fails")
		assert.Equal(t, 1, strings.Count(s.Logs.String(), "queue history: writing minutes failed"),
			"one warning for the failure, not one per flush or request:\n%s", s.Logs.String())

		// The history still answers, from memory.
		h := queueHistory(s, "hwf")
		assert.EqualValues(t, 3, h.Points[57].Produced)
		assert.EqualValues(t, 2, h.Points[57].Completed)
		assert.EqualValues(t, 2, h.Points[58].Produced)
		assert.EqualValues(t, 1, h.Points[58].Completed)
		assert.EqualValues(t, 1, h.Points[59].Produced)

		// Minute 3: writes work again, and the next flush (a minute has
		// ended) stores every finished minute the failure held back.
		w.setFail(false)
		s.Advance(time.Minute)
		s.Produce("hwf", "7")
		servertest.Eventually(t, func() bool { return w.storedAll(m0, m1, m2) }, "minutes 0-2 should be stored once writes work")

		// Writes fail again as the server stops, so its last write (the
		// minute in progress, and any minute not yet stored) is lost: what
		// the restarted server shows is what the retry stored.
		w.setFail(true)
		s.Restart()
		h = queueHistory(s, "hwf")
		require.Equal(t, m3, h.Points[59].At.AsTime().UTC())
		assert.EqualValues(t, 3, h.Points[56].Produced, "minute 0, stored by the retry")
		assert.EqualValues(t, 2, h.Points[56].Completed)
		assert.EqualValues(t, 2, h.Points[57].Produced, "minute 1")
		assert.EqualValues(t, 1, h.Points[57].Completed)
		assert.EqualValues(t, 1, h.Points[58].Produced, "minute 2")
		assert.Zero(t, h.Points[59].Produced, "minute 3, in progress at the restart: its write failed")
	})
}
