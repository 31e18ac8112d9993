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
//
// After is the exception, for code that waits on the clock it is given
// (the worker's Config.Clock): its channels receive when Set or Advance
// moves the time to or past theirs.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

// fakeWaiter is one After: ch receives once the time reaches at.
type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a Fake that tells t until moved.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the time the clock is set to.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Set sets the clock to t, which may be before the current time, and
// fires the After channels whose time has come.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
	f.fire()
}

// Advance moves the clock forward by d (backward when d < 0), fires the
// After channels whose time has come, and returns the new time.
func (f *Fake) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.fire()
	return f.now
}

// After returns a channel (buffered: nobody needs to receive) that
// receives the clock's time once Set or Advance has moved it d past the
// current time; at once when d <= 0.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	f.waiters = append(f.waiters, fakeWaiter{at: f.now.Add(d), ch: ch})
	f.fire()
	return ch
}

// fire sends on the After channels whose time has come. f.mu is held.
func (f *Fake) fire() {
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at.After(f.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- f.now
	}
	clear(f.waiters[len(kept):])
	f.waiters = kept
}

var _ Clock = (*Fake)(nil)
