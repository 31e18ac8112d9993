package clock

import (
	"sync"
	"time"
)

// Fake is a Clock that tells the time it is set to, for tests: time moves
// only when Set or Advance moves it. Safe for concurrent use.
//
// The queue engines sleep on real timers computed from Now, so a timer
// never fires because a Fake moved: lifecycle work made due by Advance
// (an expired lease, a scheduled item, an expire deadline) runs at the
// queue loop's next iteration, which the next request through the loop
// starts (see internal/queue/queuetest).
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a Fake that tells t until moved.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the time the clock is set to.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Set sets the clock to t, which may be before the current time.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}

// Advance moves the clock forward by d (backward when d < 0) and returns
// the new time.
func (f *Fake) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	return f.now
}

var _ Clock = (*Fake)(nil)
