// Package clock lets the logical queue and the service read time through an
// injected Clock, so that tests can control it.
package clock

import "time"

// Clock tells the time. Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }
