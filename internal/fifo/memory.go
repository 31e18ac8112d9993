package fifo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"time"
)

// The bounds of Memory: the sends it remembers, the receive attempts, and
// the bytes of their Data.
const (
	maxSentRemembered     = 100_000
	maxAttemptsRemembered = 10_000
	maxAttemptBytes       = 32 << 20
)

// Memory is the Store of one node (the memory and Pebble backends): it
// remembers the last 100,000 sends within their window and the last 10,000
// receive attempts (32 MiB of Data) within theirs, until the process ends.
// Safe for concurrent use; its mutex is a leaf.
type Memory struct {
	mu   sync.Mutex
	seq  map[uint64]uint64 // queue → its last SequenceNumber
	sent map[sentKey]sentRecord
	// sentOrder holds the keys in the order they were recorded, with the
	// deadline each got then (a key recorded anew appears twice: its
	// older place deletes nothing).
	sentOrder []sentEntry
	attempts  map[AttemptKey]*memAttempt
	byHandle  map[handleKey]*memAttempt
	order     []*memAttempt
	bytes     int
}

type sentKey struct {
	queue uint64
	key   string
}

type sentRecord struct {
	Sent
	deadline time.Time
}

type sentEntry struct {
	k        sentKey
	deadline time.Time
}

type handleKey struct {
	queue     uint64
	partition int32
	id        uint64
}

// memAttempt is one remembered receive; done is closed once it has its
// result (a retry waits for it).
type memAttempt struct {
	Attempt
	done  chan struct{}
	until time.Time
	bytes int
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{seq: map[uint64]uint64{}, sent: map[sentKey]sentRecord{}, attempts: map[AttemptKey]*memAttempt{},
		byHandle: map[handleKey]*memAttempt{}}
}

// Send implements Store.
func (m *Memory) Send(_ context.Context, queue uint64, key string, id [16]byte, now time.Time, window time.Duration) (Sent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seq := nextSeq(m.seq[queue], now)
	m.seq[queue] = seq
	k := sentKey{queue, key}
	if r, ok := m.sent[k]; ok && now.Before(r.deadline) {
		return r.Sent, nil
	}
	r := sentRecord{Sent{id, seq}, now.Add(window)}
	m.sent[k] = r
	m.sentOrder = append(m.sentOrder, sentEntry{k, r.deadline})
	// Oldest first: past their window, or over the bound (sent's, and
	// sentOrder's own: a key recorded again leaves its old entry behind).
	for len(m.sentOrder) > 0 && (len(m.sent) > maxSentRemembered || len(m.sentOrder) > 2*maxSentRemembered || !now.Before(m.sentOrder[0].deadline)) {
		old := m.sentOrder[0]
		m.sentOrder = m.sentOrder[1:]
		if cur, ok := m.sent[old.k]; ok && cur.deadline.Equal(old.deadline) {
			delete(m.sent, old.k)
		}
	}
	if cap(m.sentOrder) > 2*maxSentRemembered && len(m.sentOrder) < cap(m.sentOrder)/4 {
		m.sentOrder = slices.Clone(m.sentOrder)
	}
	return r.Sent, nil
}

// BeginAttempt implements Store.
func (m *Memory) BeginAttempt(ctx context.Context, k AttemptKey, now time.Time, replace string) (Attempt, bool, error) {
	for {
		m.mu.Lock()
		m.evict(now)
		a, ok := m.attempts[k]
		if ok && (replace == "" || a.Token != replace) && now.Before(a.until) {
			m.mu.Unlock()
			select {
			case <-a.done:
			case <-ctx.Done():
				return Attempt{}, false, ctx.Err()
			}
			m.mu.Lock()
			current := m.attempts[k] == a
			out := a.Attempt
			out.IDs = slices.Clone(a.IDs)
			m.mu.Unlock()
			if !current { // its receive got nothing, or failed: start anew
				continue
			}
			return out, false, nil
		}
		if ok {
			m.remove(a)
		}
		a = &memAttempt{Attempt: Attempt{Key: k, Token: NewToken()}, done: make(chan struct{}), until: now.Add(AttemptWindow)}
		m.attempts[k] = a
		m.order = append(m.order, a)
		m.mu.Unlock()
		return a.Attempt, true, nil
	}
}

// FinishAttempt implements Store.
func (m *Memory) FinishAttempt(_ context.Context, r Attempt) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.attempts[r.Key]
	if !ok || a.Token != r.Token {
		return ErrGone
	}
	defer closeDone(a)
	if len(r.IDs) == 0 || r.Deadline.IsZero() {
		m.remove(a)
		return nil
	}
	a.Partition, a.IDs, a.Data, a.ReceivedAt, a.Deadline = r.Partition, slices.Clone(r.IDs), r.Data, r.ReceivedAt, r.Deadline
	a.bytes = len(r.Data)
	for _, id := range a.IDs {
		m.byHandle[handleKey{r.Key.Queue, a.Partition, id}] = a
	}
	m.bytes += a.bytes
	m.evict(r.ReceivedAt)
	return nil
}

// DropAttempt implements Store.
func (m *Memory) DropAttempt(_ context.Context, k AttemptKey, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.attempts[k]
	if !ok || a.Token != token {
		return nil
	}
	m.remove(a)
	return nil
}

// RenewAttempt implements Store.
func (m *Memory) RenewAttempt(_ context.Context, k AttemptKey, token string, deadline time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.attempts[k]; ok && a.Token == token {
		a.Deadline = deadline
		return nil
	}
	return ErrGone
}

// Touch implements Store.
func (m *Memory) Touch(_ context.Context, queue uint64, partition int32, ids []uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.byHandle) == 0 {
		return nil
	}
	for _, id := range ids {
		if a, ok := m.byHandle[handleKey{queue, partition, id}]; ok {
			a.Modified = true
		}
	}
	return nil
}

// evict forgets the attempts whose window has ended and the oldest beyond
// the bounds. Called with m.mu held.
func (m *Memory) evict(now time.Time) {
	for len(m.order) > 0 {
		a := m.order[0]
		if m.attempts[a.Key] == a && now.Before(a.until) && len(m.attempts) <= maxAttemptsRemembered && m.bytes <= maxAttemptBytes {
			break
		}
		m.order = m.order[1:]
		m.remove(a)
	}
	if cap(m.order) > 2*maxAttemptsRemembered && len(m.order) < cap(m.order)/4 {
		m.order = slices.Clone(m.order)
	}
}

// remove forgets a (its place in order stays until evict reaches it).
// Called with m.mu held.
func (m *Memory) remove(a *memAttempt) {
	if m.attempts[a.Key] != a {
		return
	}
	delete(m.attempts, a.Key)
	for _, id := range a.IDs {
		if hk := (handleKey{a.Key.Queue, a.Partition, id}); m.byHandle[hk] == a {
			delete(m.byHandle, hk)
		}
	}
	m.bytes -= a.bytes
	closeDone(a) // a retry waiting for it starts anew
}

// closeDone closes a.done unless it is closed. Called with m.mu held.
func closeDone(a *memAttempt) {
	select {
	case <-a.done:
	default:
		close(a.done)
	}
}

// NewToken returns a random Attempt.Token.
func NewToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
