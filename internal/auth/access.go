package auth

import (
	"context"
	"strings"

	"github.com/styxq/styx/internal/apierr"
)

// The access rule: which calls a key may make on which queues, written once
// for every door (issue 50). A door only translates: its request onto an
// Access (the /v1 call it follows, the name its client knows it by, the
// queues it names) and a refusal (apierr.Forbidden) onto its wire format.
// /v1 (transport) names the call by its path and the queues by the
// request's fields; the SQS door by its action (sqs.Call.Access) and the
// queues its input names (a QueueUrl, a RedrivePolicy's target, a move
// task's source and destination). The queues a call reaches only once it
// has looked something up (a redrive task's dead-letter queue) are checked
// by the same rule, with the same Access, once known.

// Access is a request as the access rule sees it, whatever door it came
// through. Values are read-only once made.
type Access struct {
	// Op is the /v1 call whose scope and queue rules the request follows
	// ("/v1/queue.produce"; ScopeOf). An Op that is no API call needs
	// Admin.
	Op string
	// Call names the call in a refusal as the client made it: an SQS
	// action ("SendMessage"). Empty means Op, the /v1 path.
	Call string
	// Queues are the queues the request names or acts on. Empty names are
	// skipped: the door refuses them (400) afterwards.
	Queues []string
}

// On returns a with queues added to the queues it names.
func (a Access) On(queues ...string) Access {
	a.Queues = append(a.Queues[:len(a.Queues):len(a.Queues)], queues...)
	return a
}

// name returns the call as a refusal names it.
func (a Access) name() string {
	if a.Call != "" {
		return a.Call
	}
	return a.Op
}

// Authorize is the access rule of every door: nil without --auth (no
// principal in ctx), and else the principal's Authorize of a.
func Authorize(ctx context.Context, a Access) error {
	if p := FromContext(ctx); p != nil {
		return p.Authorize(a)
	}
	return nil
}

// Authorize returns nil when p may make the call a, and else an
// apierr.Forbidden (403) naming the call as its client made it (a.Call, or
// a.Op) and what is missing: the scope of a.Op ("lacks scope 'dead',
// which /v1/dead.list needs"), every queue for a call on the whole server
// (keys.*, /metrics) by a key with queue patterns, or the first queue of
// a.Queues that p's patterns do not cover ("not for 'billing', which
// SendMessage needs"). It looks nothing up, so its answer never depends on
// whether a queue exists.
func (p *Principal) Authorize(a Access) error {
	s, ok := ScopeOf(a.Op)
	if !ok {
		s = Admin
	}
	call := a.name()
	if !p.Has(s) {
		return apierr.New(apierr.Forbidden, "forbidden; key '%s' lacks scope '%s', which %s needs", p.Name, s, call)
	}
	if wholeServer[a.Op] && len(p.Queues) > 0 {
		return apierr.New(apierr.Forbidden, "forbidden; key '%s' has scope '%s' only for queues '%s'; %s needs it for every queue",
			p.Name, s, strings.Join(p.Queues, ","), call)
	}
	for _, q := range a.Queues {
		if q != "" && !p.Covers(q) {
			return apierr.New(apierr.Forbidden, "forbidden; key '%s' has scope '%s' only for queues '%s', not for '%s', which %s needs",
				p.Name, s, strings.Join(p.Queues, ","), clip(q), call)
		}
	}
	return nil
}
