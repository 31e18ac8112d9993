package sqs

import (
	"context"

	"github.com/styxq/styx/internal/audit"
	"github.com/styxq/styx/internal/auth"
)

// actionPaths maps each action onto the /v1 call whose scope and queue
// rules it follows with --auth (internal/auth): sending is produce;
// receiving, deleting and visibility changes are consume; reading a queue
// is read; administering one is admin; move tasks are dead.
var actionPaths = map[string]string{
	"SendMessage":                  "/v1/queue.produce",
	"SendMessageBatch":             "/v1/queue.produce",
	"ReceiveMessage":               "/v1/queue.lease",
	"DeleteMessage":                "/v1/queue.complete",
	"DeleteMessageBatch":           "/v1/queue.complete",
	"ChangeMessageVisibility":      "/v1/queue.renew",
	"ChangeMessageVisibilityBatch": "/v1/queue.renew",
	"GetQueueUrl":                  "/v1/queues.info",
	"GetQueueAttributes":           "/v1/queues.info",
	"ListQueues":                   "/v1/queues.list",
	"ListDeadLetterSourceQueues":   "/v1/queues.info",
	"ListQueueTags":                "/v1/queues.info",
	"CreateQueue":                  "/v1/queues.create",
	"DeleteQueue":                  "/v1/queues.delete",
	"SetQueueAttributes":           "/v1/queues.update",
	"TagQueue":                     "/v1/queues.update",
	"UntagQueue":                   "/v1/queues.update",
	"PurgeQueue":                   "/v1/queue.clear",
	"StartMessageMoveTask":         "/v1/dead.redrive",
	"ListMessageMoveTasks":         "/v1/redrives.list",
	"CancelMessageMoveTask":        "/v1/redrives.cancel",
}

// accessKey is the context key of the Access of the call being served
// (Serve puts Call.Access there).
type accessKey struct{}

// Access returns the call as the access rule of internal/auth sees it: the
// /v1 call whose scope and queue rules it follows, named by its action in
// a refusal (a 403 says "which SendMessage needs"). The pipeline checks it
// before Serve (the scope); each action adds the queues its input names
// (allow).
func (c *Call) Access() auth.Access { return auth.Access{Op: c.Op, Call: c.Action} }

// allow checks the request's key (none without --auth) by the access rule
// (auth.Authorize) on the queues the action names, before anything is
// looked up (so the answer never tells whether a queue exists). The action
// only translates: which queues; the rule is internal/auth's.
func (h *Handler) allow(ctx context.Context, queues ...string) error {
	if len(queues) > 0 {
		// The first queue an action names is the one it acts on, for the
		// pipeline's audit line.
		audit.From(ctx).SetQueue(queues[0])
	}
	a, ok := ctx.Value(accessKey{}).(auth.Access)
	if !ok {
		a = auth.Access{Op: "/v1/queues.create"} // an action without a mapping needs admin
	}
	return auth.Authorize(ctx, a.On(queues...))
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
