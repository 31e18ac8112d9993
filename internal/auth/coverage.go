package auth

import (
	"context"
	"slices"

	"github.com/styxq/styx/internal/queue"
)

// The request's key and the queues it covers: what every door asks of the
// principal in a request's context (FromContext), written once.

// KeyQueues returns the queue patterns of the request's key: none without
// --auth or for a key of every queue. A redrive task records them
// (redrive.StartParams.KeyQueues), so that it moves items only into queues
// the key that started it covers.
func KeyQueues(ctx context.Context) []string {
	if p := FromContext(ctx); p != nil {
		return p.Queues
	}
	return nil
}

// ListCovered lists queues as qs.List does, leaving out those the
// request's key does not cover (Allowed): a key limited to "orders*" lists
// only those, still up to p.Limit of them (every one when p.Limit <= 0),
// reading further pages of qs as it needs. Every listing of queues on every
// door goes through it (/v1's queues.list, SQS's ListQueues).
func ListCovered(ctx context.Context, qs queue.Queues, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	if pr := FromContext(ctx); pr == nil || len(pr.Queues) == 0 || p.Limit <= 0 {
		out, err := qs.List(ctx, p)
		return slices.DeleteFunc(out, func(info queue.QueueInfo) bool { return !Allowed(ctx, info.Name) }), err
	}
	limit, fetch, seen := p.Limit, p.Limit, ""
	var out []queue.QueueInfo
	for {
		page, err := qs.List(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, info := range page {
			if info.Name != seen && Allowed(ctx, info.Name) && len(out) < limit {
				out = append(out, info)
			}
		}
		if len(out) == limit || len(page) < fetch {
			return out, nil
		}
		// The next page starts at the last name read (a pivot is
		// inclusive, and PostgreSQL takes no NUL byte to step past it);
		// one more than a page, as that name is read again.
		seen = page[len(page)-1].Name
		p.Pivot, fetch = seen, limit+1
		p.Limit = fetch
	}
}
