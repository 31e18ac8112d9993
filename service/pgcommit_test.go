package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestPostgresCommitOutcomeUnknown cuts a node's connection at the COMMIT
// of a produce and of a complete, on two nodes sharing one database: node A
// reaches PostgreSQL through pgProxy, node B directly. In the first case
// the proxy forwards the COMMIT, waits for PostgreSQL's answer (checked to
// be COMMIT: the change is committed) and drops the connection instead of
// relaying it; in the second it drops the connection without forwarding
// the COMMIT (nothing is committed). A's client cannot tell the two apart,
// and the test proves that it is answered the same in both: 453 (storage
// unavailable, "commit outcome unknown"), never 200 nor 500; that B sees exactly what
// PostgreSQL did (the item stored once, or not at all; the item completed,
// or still leased); and what the client's retry of the same request then
// does: a produce stores the item again (twice in all when the first
// commit happened: nothing deduplicates it), a complete answers 400 "not
// leased" when the first commit happened (ids are lease handles, never
// reused: the retry changes nothing) and 200 otherwise; either way the
// item is completed exactly once. Node A serves again at once.
func TestPostgresCommitOutcomeUnknown(t *testing.T) {
	base := pgtest.URL(t)
	proxy := startPGProxy(t, pgHost(t, base))
	a := servertest.Start(t, servertest.Backend{Name: "postgres", URL: proxy.url(base)})
	b := servertest.Start(t, servertest.Backend{Name: "postgres", URL: base})
	b.CreateQueue(&pb.QueueInfo{QueueName: "cu", LeaseTimeout: "1m"})

	count := func(payload string) (n int, leased bool) {
		for _, it := range b.Items("cu") {
			if string(it.Payload) == payload {
				n++
				leased = it.IsLeased
			}
		}
		return n, leased
	}
	// Every cut must reach its victim: the answer arrives within a second
	// of the request (the node does not wait for a timeout).
	answered := func(t *testing.T, cut <-chan string) string {
		select {
		case tag := <-cut:
			return tag
		case <-time.After(10 * time.Second):
			t.Fatal("the proxy saw no COMMIT of the armed transaction")
			return ""
		}
	}

	for _, c := range []struct {
		name      string
		forward   bool
		committed string
	}{
		{"committed, answer lost", true, "COMMIT"},
		{"commit never sent", false, ""},
	} {
		t.Run("produce/"+c.name, func(t *testing.T) {
			p := fmt.Sprintf("produce-%v", c.forward)
			req := &pb.QueueProduceRequest{QueueName: "cu", RequestTimeout: "10s",
				Items: []*pb.QueueProduceItem{{Bytes: []byte(p)}}}
			cut := proxy.arm("INSERT INTO styx_items", c.forward)
			began := time.Now()
			err := a.C.QueueProduce(ctx, req)
			servertest.RequireCode(t, err, styx.CodeUnavailable, "postgres", "commit outcome unknown")
			require.Less(t, time.Since(began), 2*time.Second, "answered at once")
			require.Equal(t, c.committed, answered(t, cut))
			want := 0
			if c.forward {
				want = 1
			}
			n, _ := count(p)
			require.Equal(t, want, n, "node B sees what PostgreSQL committed")

			// The client retries, as 453 says to.
			require.NoError(t, a.C.QueueProduce(ctx, req), "node A serves again")
			n, _ = count(p)
			require.Equal(t, want+1, n, "a retried produce is stored again: at-least-once")
		})

		t.Run("produce with a deduplication id/"+c.name, func(t *testing.T) {
			// The retry of a produce whose items carry deduplication ids
			// stores each once, whether the first COMMIT landed or not,
			// and through either node.
			p := fmt.Sprintf("produce-dedup-%v", c.forward)
			req := &pb.QueueProduceRequest{QueueName: "cu", RequestTimeout: "10s",
				Items: []*pb.QueueProduceItem{{Bytes: []byte(p), DeduplicationId: p}}}
			cut := proxy.arm("INSERT INTO styx_items", c.forward)
			servertest.RequireCode(t, a.C.QueueProduce(ctx, req), styx.CodeUnavailable, "postgres", "commit outcome unknown")
			require.Equal(t, c.committed, answered(t, cut))
			require.NoError(t, a.C.QueueProduce(ctx, req), "node A serves again")
			require.NoError(t, b.C.QueueProduce(ctx, req), "node B")
			n, _ := count(p)
			require.Equal(t, 1, n, "a retried produce with a deduplication id is stored once")
		})

		t.Run("complete/"+c.name, func(t *testing.T) {
			p := fmt.Sprintf("complete-%v", c.forward)
			b.Produce("cu", p)
			var item *pb.QueueLeaseItem
			var part int32
			for item == nil {
				res := b.Lease("cu", 10)
				for _, it := range res.Items {
					if string(it.Bytes) == p {
						item, part = it, res.Partition
						continue
					}
					b.Complete("cu", res.Partition, it.Id) // a produce's retry of the subtests above
				}
			}
			req := &pb.QueueCompleteRequest{QueueName: "cu", Partition: part, Ids: []string{item.Id}}
			cut := proxy.arm("DELETE FROM styx_items WHERE queue_id=$1 AND id = ANY", c.forward)
			err := a.C.QueueComplete(ctx, req)
			servertest.RequireCode(t, err, styx.CodeUnavailable, "postgres", "commit outcome unknown")
			require.Equal(t, c.committed, answered(t, cut))
			n, leased := count(p)
			if c.forward {
				require.Equal(t, 0, n, "node B: the complete is committed")
			} else {
				require.Equal(t, 1, n, "node B: nothing committed")
				require.True(t, leased, "node B: the item is still leased")
			}

			err = a.C.QueueComplete(ctx, req)
			if c.forward {
				servertest.RequireCode(t, err, styx.CodeBadRequest, "not leased")
			} else {
				require.NoError(t, err)
			}
			n, _ = count(p)
			require.Equal(t, 0, n, "completed exactly once")
		})
	}

	// Node A is whole again: a produce on A is leased on B.
	a.Produce("cu", "after")
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		res, err := b.C.QueueLease(lctx, &pb.QueueLeaseRequest{QueueName: "cu", BatchSize: 10, ClientId: "end", RequestTimeout: "5s"})
		require.NoError(t, err)
		for _, it := range res.Items {
			if string(it.Bytes) == "after" {
				return
			}
		}
	}
}
