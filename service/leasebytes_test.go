package service_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestLeaseBoundedByBytes: a /v1 lease's items take at most the server's
// max_request_bytes of payload and attributes (always at least one item);
// the items beyond the bound are not leased (no attempt counted) and the
// next lease takes them (issue 48).
func TestLeaseBoundedByBytes(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartWith(t, b, func(c *daemon.Config) { c.MaxRequestBytes = 4 << 20 })
		s.CreateQueue(&pb.QueueInfo{QueueName: "big", LeaseTimeout: "1m", ExpireTimeout: "24h", MaxAttempts: 5, RequestedPartitions: 1})
		const size = 1_000_000 // 4 fit in 4 MiB, 5 do not
		for range 10 {
			require.NoError(t, s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "big", RequestTimeout: "1m",
				Items: []*pb.QueueProduceItem{{Bytes: bytes.Repeat([]byte("x"), size)}}}))
		}
		seen := map[string]bool{}
		for _, want := range []int{4, 4, 2} {
			res := s.Lease("big", 1000)
			require.Equal(t, want, len(res.Items), "items of the lease")
			for _, it := range res.Items {
				require.Len(t, it.Bytes, size)
				require.Equal(t, int32(1), it.Attempts, "an item beyond the bound was leased before")
				require.False(t, seen[it.Id], "item %s leased twice", it.Id)
				seen[it.Id] = true
			}
		}
		require.Len(t, seen, 10)
	})
}

// TestGroupedLeaseBoundedByBytes: on an ordered queue a /v1 lease is bounded
// by max_request_bytes too: a group's run is cut at the bound (at least one
// item), the items left stay ready, in order, for the group's next lease
// once the run is completed; no item is leased twice or given an attempt
// it was not handed out for (issue 48).
func TestGroupedLeaseBoundedByBytes(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartWith(t, b, func(c *daemon.Config) { c.MaxRequestBytes = 4 << 20 })
		s.CreateQueue(&pb.QueueInfo{QueueName: "big", LeaseTimeout: "1m", ExpireTimeout: "24h", MaxAttempts: 5, RequestedPartitions: 1,
			Ordered: true})
		const size = 1_000_000 // 4 fit in 4 MiB, 5 do not
		for _, g := range []string{"a", "b"} {
			for i := range 6 {
				p := append([]byte(fmt.Sprintf("%s-%d-", g, i)), bytes.Repeat([]byte("x"), size)...)[:size]
				require.NoError(t, s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "big", RequestTimeout: "1m",
					Items: []*pb.QueueProduceItem{{Bytes: p, Group: g}}}))
			}
		}
		next := map[string]int{} // each group's next item
		lease := func(group string, want int) []string {
			t.Helper()
			res := s.Lease("big", 1000)
			require.Equal(t, want, len(res.Items), "items of the lease")
			var ids []string
			for _, it := range res.Items {
				require.Len(t, it.Bytes, size)
				require.Equal(t, int32(1), it.Attempts, "an item beyond the bound was leased before")
				require.Equal(t, group, it.Group, "one group's run per lease")
				require.True(t, bytes.HasPrefix(it.Bytes, []byte(fmt.Sprintf("%s-%d-", group, next[group]))), "group %s out of order", group)
				next[group]++
				ids = append(ids, it.Id)
			}
			return ids
		}
		a := lease("a", 4)
		bs := lease("b", 4)
		s.LeaseNone("big") // both groups have their run leased
		s.Complete("big", 0, a...)
		lease("a", 2)
		s.Complete("big", 0, bs...)
		lease("b", 2)
		require.Equal(t, map[string]int{"a": 6, "b": 6}, next)
	})
}
