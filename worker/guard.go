package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// The worker runs in its user's process, so nothing user code hands it may
// take that process down: every call into user code (the handler and its
// middleware, Backoff, Clock, the Logger's slog.Handler, a Metrics
// registerer, the client's http.RoundTripper) recovers a panic, and the
// errors a handler returns are read with guards (errorText, classify).

// maxErrorTree bounds the errors classify visits in one handler error's
// tree, so an Unwrap that returns its own error ends the walk.
const maxErrorTree = 100

// errGoexit is the error recorded for an item whose handler called
// runtime.Goexit (testing's FailNow does) instead of returning.
var errGoexit = errors.New("styx worker: the handler called runtime.Goexit instead of returning (t.FailNow in a handler?)")

// protect returns f's results, or an error naming what when f panics.
func protect[T any](what string, f func() (T, error)) (res T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("styx worker: %s panicked: %s", what, panicValue(r))
		}
	}()
	return f()
}

// panicValue is fmt.Sprint(r), or r's type when formatting r panics too (a
// String method that panics with a value whose String method panics: fmt
// recovers the first panic, not the second).
func panicValue(r any) (s string) {
	defer func() {
		if recover() != nil {
			s = fmt.Sprintf("%T value whose String or Error method panicked", r)
		}
	}()
	return fmt.Sprint(r)
}

// errorText is err's text as the server stores it: invalid UTF-8 replaced
// by U+FFFD, then cut on a rune boundary to maxErrorBytes (the server's
// limit). An error whose Error method panics (a nil pointer of an error
// type, say) is described by its type and the panic; an empty text by the
// error's type.
func errorText(err error) string {
	s := errorString(err)
	if s == "" {
		s = fmt.Sprintf("%T with no text", err)
	}
	return cutText(s, maxErrorBytes)
}

// errorString is err.Error(), or what happened when it panicked.
func errorString(err error) (s string) {
	defer func() {
		if r := recover(); r != nil {
			if v := reflect.ValueOf(err); v.Kind() == reflect.Pointer && v.IsNil() {
				s = fmt.Sprintf("nil %T returned as an error; its Error method panicked: %s", err, panicValue(r))
			} else {
				s = fmt.Sprintf("%T: its Error method panicked: %s", err, panicValue(r))
			}
		}
	}()
	return err.Error()
}

// cutText returns s with each run of invalid UTF-8 replaced by U+FFFD, cut
// to at most limit bytes on a rune boundary: the longest valid prefix that
// fits, so at most 3 bytes short of limit.
func cutText(s string, limit int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, string(utf8.RuneError))
	}
	if len(s) <= limit {
		return s
	}
	i := max(limit, 0)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// classify reports what a handler's error asks for, as errors.As would
// find it: Dead (dead), or RetryAfter (retryAfter set to its delay). An
// error tree whose Unwrap or As methods panic, or that is deeper than
// maxErrorTree (an Unwrap that returns its own error), is an ordinary error
// beyond that point.
func classify(err error) (dead bool, retryAfter *time.Duration) {
	dead = visit(err, func(e error) bool {
		if d, ok := e.(*deadError); ok {
			return d != nil
		}
		var d *deadError
		a, ok := e.(interface{ As(any) bool })
		return ok && a.As(&d) && d != nil
	})
	if dead {
		return true, nil
	}
	visit(err, func(e error) bool {
		r, ok := e.(*retryAfterError)
		if !ok {
			a, hasAs := e.(interface{ As(any) bool })
			ok = hasAs && a.As(&r)
		}
		if ok && r != nil {
			retryAfter = &r.d
			return true
		}
		return false
	})
	return false, retryAfter
}

// visit calls f on err and the errors in its tree, depth first as
// errors.As walks them, until f returns true, and reports whether it did.
// It visits at most maxErrorTree errors; a panic (in f or in an Unwrap
// method) ends the walk with false.
func visit(err error, f func(error) bool) (found bool) {
	defer func() {
		if recover() != nil {
			found = false
		}
	}()
	budget := maxErrorTree
	var walk func(error) bool
	walk = func(err error) bool {
		for err != nil && budget > 0 {
			budget--
			if f(err) {
				return true
			}
			switch u := err.(type) {
			case interface{ Unwrap() error }:
				err = u.Unwrap()
			case interface{ Unwrap() []error }:
				for _, e := range u.Unwrap() {
					if walk(e) {
						return true
					}
				}
				return false
			default:
				return false
			}
		}
		return false
	}
	return walk(err)
}

// backoff is Config.Backoff(attempts), or DefaultBackoff's answer when it
// panics.
func (w *Worker) backoff(attempts int32) (d time.Duration) {
	defer func() {
		if r := recover(); r != nil {
			d = DefaultBackoff(attempts)
			w.log.Error("Config.Backoff panicked; using DefaultBackoff", "attempts", attempts, "panic", panicValue(r), "backoff", d)
		}
	}()
	return w.cfg.Backoff(attempts)
}

// safeClock is a user's Config.Clock behind a recover: a call that panics
// (or an After that returns a nil channel, which would block forever) is
// answered by the system clock. The first such failure is logged.
type safeClock struct {
	c        Clock
	log      *slog.Logger
	reported atomic.Bool
}

func (s *safeClock) Now() (t time.Time) {
	defer func() {
		if r := recover(); r != nil {
			s.report("Now panicked: " + panicValue(r))
			t = time.Now()
		}
	}()
	return s.c.Now()
}

func (s *safeClock) After(d time.Duration) (ch <-chan time.Time) {
	defer func() {
		if r := recover(); r != nil {
			s.report("After panicked: " + panicValue(r))
			ch = time.After(d)
		}
	}()
	if ch = s.c.After(d); ch == nil {
		s.report("After returned a nil channel")
		ch = time.After(d)
	}
	return ch
}

func (s *safeClock) report(what string) {
	if s.reported.CompareAndSwap(false, true) {
		s.log.Error("Config.Clock."+what+"; the system clock answered (further failures are not logged)", "clock", fmt.Sprintf("%T", s.c))
	}
}

// safeLogHandler is the slog.Handler of a user's Config.Logger behind a
// recover: a record whose handling panics is dropped (Handle returns an
// error, which slog.Logger ignores), a panicking Enabled disables the
// record, and a panicking WithAttrs or WithGroup keeps the handler as it
// was. A nil handler (a zero slog.Logger) drops every record.
type safeLogHandler struct{ h slog.Handler }

func (s safeLogHandler) Enabled(ctx context.Context, l slog.Level) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return s.h.Enabled(ctx, l)
}

func (s safeLogHandler) Handle(ctx context.Context, r slog.Record) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("styx worker: the Logger's handler panicked: %s", panicValue(p))
		}
	}()
	return s.h.Handle(ctx, r)
}

func (s safeLogHandler) WithAttrs(as []slog.Attr) (h slog.Handler) {
	defer func() {
		if recover() != nil {
			h = s
		}
	}()
	return safeLogHandler{s.h.WithAttrs(as)}
}

func (s safeLogHandler) WithGroup(name string) (h slog.Handler) {
	defer func() {
		if recover() != nil {
			h = s
		}
	}()
	return safeLogHandler{s.h.WithGroup(name)}
}
