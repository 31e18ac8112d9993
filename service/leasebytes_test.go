package service_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	pb "github.com/styxq/styx/styxpb"
)

// TestLeaseBoundedByBytes: a /v1 lease's items take at most the server's
// max_request_bytes of payload and attributes (always at least one item);
// the items beyond the bound are not leased (no attempt counted) and the
// next lease takes them (issue 48).
func TestLeaseBoundedByBytes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s := startWith(t, b, func(c *daemon.Config) { c.MaxRequestBytes = 4 << 20 })
		s.createQueue(&pb.QueueInfo{QueueName: "big", LeaseTimeout: "1m", ExpireTimeout: "24h", MaxAttempts: 5, RequestedPartitions: 1})
		const size = 1_000_000 // 4 fit in 4 MiB, 5 do not
		for range 10 {
			require.NoError(t, s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "big", RequestTimeout: "1m",
				Items: []*pb.QueueProduceItem{{Bytes: bytes.Repeat([]byte("x"), size)}}}))
		}
		seen := map[string]bool{}
		for _, want := range []int{4, 4, 2} {
			res := s.lease("big", 1000)
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
