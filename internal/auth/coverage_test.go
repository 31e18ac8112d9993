package auth_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
)

// listOnly is a queue.Queues that only lists, as the backends do: names >=
// the pivot in bytewise order, at most the limit; like PostgreSQL's text it
// refuses a NUL byte in the pivot.
type listOnly struct {
	queue.Queues
	names []string
	calls int
}

func (l *listOnly) List(_ context.Context, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	l.calls++
	if strings.ContainsRune(p.Pivot, 0) {
		return nil, errors.New("invalid byte sequence for encoding \"UTF8\": 0x00")
	}
	var out []queue.QueueInfo
	for _, n := range l.names {
		if n >= p.Pivot && (p.Limit <= 0 || len(out) < p.Limit) {
			out = append(out, queue.QueueInfo{Name: n})
		}
	}
	return out, nil
}

func names(infos []queue.QueueInfo) []string {
	out := make([]string, len(infos))
	for i, info := range infos {
		out[i] = info.Name
	}
	return out
}

func TestListCovered(t *testing.T) {
	qs := &listOnly{}
	for i := range 20 {
		qs.names = append(qs.names, fmt.Sprintf("a%02d", i), fmt.Sprintf("b%02d", i))
	}
	slices.Sort(qs.names)
	ctx := context.Background()
	key := auth.WithPrincipal(ctx, &auth.Principal{Name: "k", Scopes: []auth.Scope{auth.Read}, Queues: []string{"b*"}})

	t.Run("NoAuthListsAsList", func(t *testing.T) {
		got, err := auth.ListCovered(ctx, qs, queue.ListQueuesParams{Pivot: "a05", Limit: 3})
		require.NoError(t, err)
		require.Equal(t, []string{"a05", "a06", "a07"}, names(got))
	})
	t.Run("KeyReadsPagesUntilLimit", func(t *testing.T) {
		for _, limit := range []int{1, 2, 7, 20, 21} {
			got, err := auth.ListCovered(key, qs, queue.ListQueuesParams{Limit: limit})
			require.NoError(t, err, "limit %d", limit)
			want := qs.names[20:min(20+limit, 40)]
			require.Equal(t, want, names(got), "limit %d: covered only, no name twice", limit)
		}
	})
	t.Run("KeyFromPivot", func(t *testing.T) {
		got, err := auth.ListCovered(key, qs, queue.ListQueuesParams{Pivot: "b18", Limit: 5})
		require.NoError(t, err)
		require.Equal(t, []string{"b18", "b19"}, names(got))
	})
	t.Run("KeyNoLimit", func(t *testing.T) {
		got, err := auth.ListCovered(key, qs, queue.ListQueuesParams{})
		require.NoError(t, err)
		require.Equal(t, qs.names[20:], names(got))
	})
}
