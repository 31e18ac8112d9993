package pebble

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// logger adapts slog to Pebble's Logger, at most one line a second of each
// format (a failing flush retries many times a second; the lines left out
// are counted in the next one), and turns Fatalf into a fault.
type logger struct {
	l       *slog.Logger
	onFatal func(kind string, err error)
	mu      sync.Mutex
	last    map[string]*logRate
}

// logRate is the rate limit of one format.
type logRate struct {
	at      time.Time
	dropped int
}

func newLogger(l *slog.Logger, onFatal func(string, error)) *logger {
	return &logger{l: l, onFatal: onFatal, last: make(map[string]*logRate)}
}

// allow reports whether a line of format may be logged now, and how many
// were left out since the last one.
func (l *logger) allow(format string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.last[format]
	if r == nil {
		if len(l.last) > 1000 {
			clear(l.last)
		}
		r = &logRate{}
		l.last[format] = r
	}
	now := time.Now()
	if now.Sub(r.at) < time.Second {
		r.dropped++
		return false, 0
	}
	n := r.dropped
	r.at, r.dropped = now, 0
	return true, n
}

func (l *logger) Infof(format string, args ...any) {
	if ok, n := l.allow(format); ok {
		l.l.Info(fmt.Sprintf(format, args...), suppressed(n)...)
	}
}

func (l *logger) Errorf(format string, args ...any) {
	if ok, n := l.allow(format); ok {
		l.l.Error(fmt.Sprintf(format, args...), suppressed(n)...)
	}
}

// Fatalf logs and marks the store faulted. Pebble calls it when it cannot
// go on safely (a failed MANIFEST write, a failed commit, an invariant
// violation); panicking would take every queue down with it, often in a
// goroutine of Pebble's where nothing can recover. The store instead never
// writes through this handle again: a write that completes while the store
// is faulted is reported failed (Store.write checks after committing), and
// the monitor reopens the database from what is on disk (ADR 0015).
func (l *logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.l.Error(msg, "fatal", true)
	l.onFatal("pebble", errors.New(msg))
}

// suppressed returns the log attributes counting lines left out.
func suppressed(n int) []any {
	if n == 0 {
		return nil
	}
	return []any{"suppressed", n}
}
