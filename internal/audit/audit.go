// Package audit holds what a door learned about one call, for the one place
// that writes the audit log and the refusal log (transport's pipeline): the
// operation, the queue it acted on, what it did, and why it was refused. A
// door (service's /v1 adapter in transport, sqs) fills the Record the
// pipeline put in the request's context; the pipeline decides what is
// logged (Audited), so no door can forget to audit a call.
package audit

import "context"

// Record is one call's audit record. It is owned by the request's
// goroutine; its methods do nothing on a nil Record (a door called outside
// the pipeline, as in unit tests).
type Record struct {
	// Op is the operation, named by the /v1 path whose scope it needs
	// ("/v1/queues.delete"); an SQS action is named by the path it maps onto.
	Op string
	// Door is "v1" or "sqs"; Action is the door's own name for the call
	// ("DeleteQueue"), empty on /v1.
	Door, Action string
	// Key is the name of the caller's key ("" without --auth).
	Key string
	// Queue is the queue the call acted on, when it names one.
	Queue string
	// Attrs are what the call did (slog key-value pairs: "deleted", 6).
	Attrs []any
	// Reason is the message of a refusal (401, 403), for the refusal log.
	Reason string
	// DryRun says the call changed nothing (a dead.redrive dry run): its
	// audit line is written, but it is kept out of the activity log
	// (internal/activity), which lists what was done.
	DryRun bool
}

type ctxKey struct{}

// With returns ctx carrying a new Record for door.
func With(ctx context.Context, door string) (context.Context, *Record) {
	r := &Record{Door: door}
	return context.WithValue(ctx, ctxKey{}, r), r
}

// From returns the Record of ctx, nil when there is none.
func From(ctx context.Context) *Record {
	r, _ := ctx.Value(ctxKey{}).(*Record)
	return r
}

// SetQueue records the queue the call acts on (the first one set wins).
func (r *Record) SetQueue(q string) {
	if r != nil && r.Queue == "" {
		r.Queue = q
	}
}

// Add records what the call did: slog key-value pairs.
func (r *Record) Add(attrs ...any) {
	if r != nil {
		r.Attrs = append(r.Attrs, attrs...)
	}
}

// Refused records why the call was refused.
func (r *Record) Refused(reason string) {
	if r != nil {
		r.Reason = reason
	}
}

// audited are the operations logged at INFO with the key that made them,
// whichever door they came through (key changes are logged by
// internal/auth): the calls that delete, move or rewrite items, and those
// that make or change queues (pausing and resuming a queue's consumption,
// and moving a queue to another cluster, among them).
var audited = map[string]bool{
	"/v1/queues.delete": true, "/v1/queue.clear": true, "/v1/dead.delete": true, "/v1/dead.redrive": true,
	"/v1/redrives.cancel": true, "/v1/redrives.pause": true, "/v1/redrives.resume": true, "/v1/redrives.update": true, "/v1/storage/items.delete": true, "/v1/dead.edit": true,
	"/v1/storage/items.import": true, "/v1/queues.create": true, "/v1/queues.update": true, "/v1/queue.reload": true,
	"/v1/queues.pause": true, "/v1/queues.resume": true, "/v1/queues.move": true,
	"/v1/storage/backup": true, // a copy of every item leaves the server
}

// Audited reports whether a successful op is written to the audit log.
func Audited(op string) bool { return audited[op] }
