package service_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/queue"
	pb "github.com/styxq/styx/styxpb"
)

// produceDedup produces one item per payload, each with the deduplication
// id given beside it ("" for none): payloads and ids alternate.
func (s *server) produceDedup(queueName string, payloadsAndIDs ...string) {
	s.t.Helper()
	require.NoError(s.t, s.C.QueueProduce(ctx, dedupRequest(queueName, payloadsAndIDs...)))
}

func dedupRequest(queueName string, payloadsAndIDs ...string) *pb.QueueProduceRequest {
	req := &pb.QueueProduceRequest{QueueName: queueName, RequestTimeout: "10s"}
	for i := 0; i < len(payloadsAndIDs); i += 2 {
		req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: []byte(payloadsAndIDs[i]), DeduplicationId: payloadsAndIDs[i+1]})
	}
	return req
}

// payloads lists the payloads a queue holds, sorted.
func (s *server) payloads(queueName string) []string {
	var out []string
	for _, it := range s.items(queueName) {
		out = append(out, string(it.Payload))
	}
	slices.Sort(out)
	return out
}

// TestDeduplication: an item whose deduplication_id the queue accepted
// within the window (5 minutes from the acceptance) is acknowledged and not
// stored again, whatever became of the first item, across a restart; the
// window ends; ids are per queue; bad ids are refused naming the field.
func TestDeduplication(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s := startFake(t, b)
		s.createQueue(&pb.QueueInfo{QueueName: "dd", LeaseTimeout: "1m", RequestedPartitions: 2})
		s.createQueue(&pb.QueueInfo{QueueName: "other", LeaseTimeout: "1m"})

		s.produceDedup("dd", "a", "x", "a-again-in-the-request", "x", "b", "", "b-again", "")
		require.Equal(t, []string{"a", "b", "b-again"}, s.payloads("dd"), "one item per id in a request; items without an id all stored")

		s.produceDedup("dd", "a-retried", "x", "c", "y")
		require.Equal(t, []string{"a", "b", "b-again", "c"}, s.payloads("dd"), "a retried id is acknowledged, not stored")

		// The window counts from the acceptance, not the item's life.
		for len(s.items("dd")) > 0 {
			res := s.lease("dd", 10)
			var ids []string
			for _, it := range res.Items {
				ids = append(ids, it.Id)
			}
			s.complete("dd", res.Partition, ids...)
		}
		s.produceDedup("dd", "a-after-complete", "x")
		require.Empty(t, s.payloads("dd"), "an id is remembered after its item completed")

		s.produceDedup("other", "a-elsewhere", "x")
		require.Equal(t, []string{"a-elsewhere"}, s.payloads("other"), "ids are per queue")

		s.restart()
		s.produceDedup("dd", "a-after-restart", "x", "c-after-restart", "y")
		require.Empty(t, s.payloads("dd"), "the window survives a restart")

		s.advance(queue.DeduplicationWindow - time.Second)
		s.produceDedup("dd", "a-late", "x")
		require.Empty(t, s.payloads("dd"), "within the window")
		s.advance(time.Second)
		s.produceDedup("dd", "a-new-window", "x", "again", "x")
		require.Equal(t, []string{"a-new-window"}, s.payloads("dd"), "after the window the id is accepted anew, once")
		s.advance(queue.DeduplicationWindow - time.Second)
		s.produceDedup("dd", "a-in-new-window", "x")
		require.Equal(t, []string{"a-new-window"}, s.payloads("dd"), "the new window counts from the new acceptance")

		// Ended windows are forgotten as produces go on, and the ids
		// accepted meanwhile stay.
		s.advance(2 * queue.DeduplicationWindow)
		for i := range 50 {
			s.produceDedup("dd", fmt.Sprint("n", i), fmt.Sprint("n", i))
		}
		s.restart()
		s.produceDedup("dd", "n0-again", "n0", "x-again", "x")
		require.Len(t, s.payloads("dd"), 52, "n0 remembered, x's window over")

		for _, c := range []struct{ id, says string }{
			{strings.Repeat("d", 129), "129 bytes, the limit is 128"},
			{"with space", "byte 4 (0x20)"},
			{"é", "byte 0 (0xc3)"},
		} {
			err := s.C.QueueProduce(ctx, dedupRequest("dd", "bad", c.id))
			requireCode(t, err, styx.CodeBadRequest, "items[0].deduplication_id", c.says)
		}
		require.Len(t, s.payloads("dd"), 52, "a refused produce stores nothing")

		// A deleted queue's ids go with it.
		require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "other"}))
		s.createQueue(&pb.QueueInfo{QueueName: "other", LeaseTimeout: "1m"})
		s.produceDedup("other", "a-in-new-queue", "x")
		require.Equal(t, []string{"a-in-new-queue"}, s.payloads("other"))
	})
}

// TestDeduplicationWindow: a queue's deduplication_window (1s..24h,
// default 5m) sets how long its ids are remembered; queues.info gives the
// window a queue sets (nothing at the default); queues.update changes it for the ids accepted from then
// on (an id keeps the window it was accepted with); a bad window is
// refused naming the field and the range.
func TestDeduplicationWindow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s := startFake(t, b)
		s.createQueue(&pb.QueueInfo{QueueName: "short", LeaseTimeout: "1m", DeduplicationWindow: "1m"})
		s.createQueue(&pb.QueueInfo{QueueName: "default", LeaseTimeout: "1m"})
		window := func(q string) string {
			info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: q})
			require.NoError(t, err)
			return info.DeduplicationWindow
		}
		require.Equal(t, "1m0s", window("short"))
		require.Empty(t, window("default"), "the default (5m) is not given")

		s.produceDedup("short", "a", "x")
		s.produceDedup("default", "a", "x")
		s.advance(time.Minute)
		s.produceDedup("short", "a-after-1m", "x")
		s.produceDedup("default", "a-after-1m", "x")
		require.Equal(t, []string{"a", "a-after-1m"}, s.payloads("short"), "a 1m window is over after 1m")
		require.Equal(t, []string{"a"}, s.payloads("default"), "the default window is not")

		require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "short", DeduplicationWindow: "2h"}))
		s.restart()
		require.Equal(t, "2h0m0s", window("short"), "kept across a restart")
		s.advance(time.Hour)
		s.produceDedup("short", "a-after-1h", "x")
		require.Equal(t, []string{"a", "a-after-1h", "a-after-1m"}, s.payloads("short"),
			"an id keeps the window it was accepted with (1m)")
		s.advance(time.Hour)
		s.produceDedup("short", "a-after-2h", "x")
		require.Equal(t, []string{"a", "a-after-1h", "a-after-1m"}, s.payloads("short"), "one accepted since has the new window (2h)")
		require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "short", UpdateMask: []string{"deduplication_window"}}))
		require.Empty(t, window("short"), "an empty window in the mask restores the default")

		for _, c := range []struct{ window, says string }{
			{"0s", "0s is out of range 1s..24h0m0s"},
			{"25h", "25h0m0s is out of range 1s..24h0m0s"},
			{"soon", "'soon' is not a duration"},
		} {
			err := s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "bad", LeaseTimeout: "1m", DeduplicationWindow: c.window})
			requireCode(t, err, styx.CodeBadRequest, "deduplication_window", c.says)
		}
	})
}

// TestClusterDeduplication: two nodes on one PostgreSQL database producing
// the same deduplication ids at once store each id's item once.
func TestClusterDeduplication(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	nodes[0].createQueue(&pb.QueueInfo{QueueName: "dd", LeaseTimeout: "1m", RequestedPartitions: 2})
	const ids, rounds = 200, 4
	var wg sync.WaitGroup
	for n, node := range nodes {
		for r := range rounds {
			wg.Go(func() {
				// Each producer sends every id, in its own order, ten per request.
				var args []string
				for k := range ids {
					id := (k*(2*r+1) + n*7) % ids
					args = append(args, fmt.Sprintf("node%d-round%d-id%d", n, r, id), fmt.Sprint("id", id))
					if len(args) == 20 {
						require.NoError(t, node.C.QueueProduce(ctx, dedupRequest("dd", args...)))
						args = nil
					}
				}
			})
		}
	}
	wg.Wait()
	stored := map[string]int{}
	for _, p := range nodes[1].payloads("dd") {
		stored[p[strings.LastIndex(p, "-id")+3:]]++
	}
	require.Len(t, stored, ids, "every id stored")
	for id, n := range stored {
		require.Equal(t, 1, n, "id%s stored once", id)
	}
}

// TestDeduplicationLimit: on the embedded backends (memory, Pebble) a queue
// holds at most daemon.Config.MaxDeduplicationIDs deduplication ids within
// their window; a produce that would hold more is refused whole (454, naming
// the queue, the limit and when the oldest window ends) and stores nothing,
// across partitions; ids held still deduplicate, items without an id and
// other queues are not limited, a restart keeps the count, and ended windows
// make room; styx_queue_deduplication_ids gives the ids held. PostgreSQL
// keeps its ids in its table, not in memory, and has no limit nor gauge.
func TestDeduplicationLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s := startFakeWith(t, b, func(c *daemon.Config) { c.MaxDeduplicationIDs = 3 })
		s.createQueue(&pb.QueueInfo{QueueName: "dd", LeaseTimeout: "1m", RequestedPartitions: 2, DeduplicationWindow: "1m"})
		s.createQueue(&pb.QueueInfo{QueueName: "other", LeaseTimeout: "1m"})
		firstEnds := s.now().Add(time.Minute)

		s.produceDedup("dd", "a", "a", "b", "b")
		s.advance(time.Second)
		// Two new ids where one fits, in items of groups spread over both
		// partitions: nothing of the request is stored.
		req := dedupRequest("dd", "a-again", "a", "c", "c", "d", "d", "no-id", "")
		for i, it := range req.Items {
			it.Group = fmt.Sprint("g", i)
		}
		err := s.C.QueueProduce(ctx, req)
		if b.postgres() {
			require.NoError(t, err, "postgres keeps its ids in its table: no limit")
			require.Equal(t, []string{"a", "b", "c", "d", "no-id"}, s.payloads("dd"))
			_, _, body := s.raw(http.MethodGet, "/metrics", "", "", nil)
			require.NotContains(t, string(body), "styx_queue_deduplication_ids{", "not in memory: no gauge")
			return
		}
		requireCode(t, err, styx.CodeRetry, "queue 'dd'", "3 deduplication ids", "the server's limit",
			"the oldest window ends by "+ceilSecond(firstEnds))
		require.Equal(t, []string{"a", "b"}, s.payloads("dd"), "a refused produce stores nothing")

		s.produceDedup("dd", "c", "c", "no-id", "")
		require.Equal(t, []string{"a", "b", "c", "no-id"}, s.payloads("dd"), "up to the limit")
		s.produceDedup("dd", "a-again", "a", "c-again", "c", "no-id-2", "")
		require.Equal(t, []string{"a", "b", "c", "no-id", "no-id-2"}, s.payloads("dd"),
			"at the limit, ids held still deduplicate and items without an id are stored")
		s.produceDedup("other", "x", "x")
		require.Equal(t, []string{"x"}, s.payloads("other"), "the limit is per queue")
		code, _, body := s.raw(http.MethodGet, "/metrics", "", "", nil)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, string(body), `styx_queue_deduplication_ids{queue="dd"} 3`)
		require.Contains(t, string(body), `styx_queue_deduplication_ids{queue="other"} 1`)

		s.restart()
		requireCode(t, s.C.QueueProduce(ctx, dedupRequest("dd", "e", "e")), styx.CodeRetry, "the server's limit")
		s.produceDedup("dd", "b-again", "b")
		require.Equal(t, []string{"a", "b", "c", "no-id", "no-id-2"}, s.payloads("dd"), "the ids held survive a restart")

		s.advance(time.Minute - time.Second) // a's and b's windows end; c's ends in a second
		s.produceDedup("dd", "e", "e", "f", "f")
		requireCode(t, s.C.QueueProduce(ctx, dedupRequest("dd", "a-new-window", "a")), styx.CodeRetry,
			"the oldest window ends by "+ceilSecond(firstEnds.Add(time.Second)))
		s.advance(time.Second)
		s.produceDedup("dd", "a-new-window", "a")
		require.Equal(t, []string{"a", "a-new-window", "b", "c", "e", "f", "no-id", "no-id-2"}, s.payloads("dd"),
			"ended windows make room")
	})
}

// ceilSecond formats t rounded up to the second, as the deduplication
// limit's message does.
func ceilSecond(t time.Time) string {
	return t.Add(time.Second - 1).Truncate(time.Second).UTC().Format(time.RFC3339)
}
