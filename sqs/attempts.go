package sqs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/fifo"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/text"
)

// Receive request attempts (ReceiveRequestAttemptId, FIFO queues only): a
// ReceiveMessage retried with the same attempt id within fifo.AttemptWindow
// (5 minutes) returns the messages and receipt handles of the first, and
// resets their visibility timeout, as long as their receives last and none
// of them was deleted or had its visibility changed; a retry after that is
// refused (InvalidParameterValue), as SQS refuses it, and a retry after
// their visibility timeout has passed is a new receive. The attempts are
// the fifo.Store's (Config.FIFO): on PostgreSQL every node's, so a retry
// that reaches another node returns the same messages.

// receiveAttempt serves a FIFO ReceiveMessage with ReceiveRequestAttemptId
// id (checked): the receive (n, wait, visibility as receiveMessage
// decided), or the retry of the one id names.
func (h *Handler) receiveAttempt(ctx context.Context, q queue.Queue, info queue.QueueInfo, id string, n int, wait, visibility time.Duration,
	render func(int32, []queue.LeasedItem, time.Time) receiveMessageOutput) (any, error) {
	k := fifo.AttemptKey{Queue: info.ID, Owner: auth.KeyName(ctx), ID: id}
	replace := ""
	for {
		a, fresh, err := h.state.BeginAttempt(ctx, k, h.now(), replace)
		if err != nil {
			return nil, err
		}
		if fresh {
			partition, items, deadline, err := h.receive(ctx, q, info, n, wait, visibility)
			if err != nil {
				h.dropAttempt(ctx, a)
				return nil, err
			}
			now := h.now()
			a.Partition, a.ReceivedAt, a.Deadline = partition, now, deadline
			a.IDs = make([]uint64, len(items))
			for i, it := range items {
				a.IDs[i] = it.ID
			}
			if a.Data, err = json.Marshal(items); err == nil {
				err = h.state.FinishAttempt(context.WithoutCancel(ctx), a)
			}
			if err != nil {
				// The messages are received: answer them; a retry is a
				// new receive.
				h.cfg.Log.Warn("sqs: recording a receive attempt failed", "queue", info.Name, "error", err)
				h.dropAttempt(ctx, a)
			}
			return render(partition, items, now), nil
		}
		// A retry: the first receive's messages and receipt handles, their
		// visibility timeout reset, while their receives last and none of
		// them was deleted or had its visibility changed.
		notRetryable := invalidParameter("Value %s for parameter ReceiveRequestAttemptId is invalid. Reason: The receiveRequestAttemptId is not valid anymore since the receive call is not retryable.",
			text.Escape(clip(id)))
		if a.Modified {
			return nil, notRetryable
		}
		var items []queue.LeasedItem
		if err := json.Unmarshal(a.Data, &items); err != nil || len(items) != len(a.IDs) {
			return nil, fmt.Errorf("sqs: the record of receive attempt %q is unreadable: %v", id, err)
		}
		renew := visibility
		if renew == 0 {
			renew = info.LeaseTimeout // checks the receives last; the retry below ends them
		}
		renewed, err := q.Renew(ctx, a.Partition, a.IDs, renew)
		switch {
		case isStale(err) && h.now().Add(expiryGrace).Before(a.Deadline):
			// A receive ended before its visibility timeout: its message
			// was deleted or made visible.
			return nil, notRetryable
		case isStale(err):
			// Their visibility timeout has passed: a new receive.
			replace = a.Token
			continue
		case err != nil:
			return nil, err
		}
		if visibility == 0 {
			if err := h.makeVisible(ctx, q, a.Partition, items); err != nil {
				return nil, err
			}
			h.dropAttempt(ctx, a)
		} else if err := h.state.RenewAttempt(context.WithoutCancel(ctx), k, a.Token, renewed[0]); err != nil && err != fifo.ErrGone {
			h.cfg.Log.Warn("sqs: recording a receive attempt failed", "queue", info.Name, "error", err)
		}
		return render(a.Partition, items, a.ReceivedAt), nil
	}
}

// dropAttempt forgets a, logging a failure (the attempt then ends with
// its window, or a minute after its start while it has no result).
func (h *Handler) dropAttempt(ctx context.Context, a fifo.Attempt) {
	if err := h.state.DropAttempt(context.WithoutCancel(ctx), a.Key, a.Token); err != nil {
		h.cfg.Log.Warn("sqs: dropping a receive attempt failed", "attempt", a.Key.ID, "error", err)
	}
}

// touchAttempts records that the receives of lease ids of info's partition
// were deleted or had their visibility changed: the attempts that hold them
// can no longer be retried. Only FIFO queues have attempts; a failure is
// logged (a retry then still finds a deleted message gone: its renew).
func (h *Handler) touchAttempts(ctx context.Context, info queue.QueueInfo, partition int32, ids ...uint64) {
	if !isFIFO(info) {
		return
	}
	if err := h.state.Touch(context.WithoutCancel(ctx), info.ID, partition, ids); err != nil {
		h.cfg.Log.Warn("sqs: marking receive attempts failed", "queue", info.Name, "error", err)
	}
}
