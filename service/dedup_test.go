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
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// produceDedup produces one item per payload, each with the deduplication
// id given beside it ("" for none): payloads and ids alternate.
func produceDedup(s *servertest.Server, queueName string, payloadsAndIDs ...string) {
	s.T.Helper()
	require.NoError(s.T, s.C.QueueProduce(ctx, dedupRequest(queueName, payloadsAndIDs...)))
}

func dedupRequest(queueName string, payloadsAndIDs ...string) *pb.QueueProduceRequest {
	req := &pb.QueueProduceRequest{QueueName: queueName, RequestTimeout: "10s"}
	for i := 0; i < len(payloadsAndIDs); i += 2 {
		req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: []byte(payloadsAndIDs[i]), DeduplicationId: payloadsAndIDs[i+1]})
	}
	return req
}

// queuePayloads lists the payloads a queue holds, sorted.
func queuePayloads(s *servertest.Server, queueName string) []string {
	var out []string
	for _, it := range s.Items(queueName) {
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
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "dd", LeaseTimeout: "1m", RequestedPartitions: 2})
		s.CreateQueue(&pb.QueueInfo{QueueName: "other", LeaseTimeout: "1m"})

		produceDedup(s, "dd", "a", "x", "a-again-in-the-request", "x", "b", "", "b-again", "")
		require.Equal(t, []string{"a", "b", "b-again"}, queuePayloads(s, "dd"), "one item per id in a request; items without an id all stored")

		produceDedup(s, "dd", "a-retried", "x", "c", "y")
		require.Equal(t, []string{"a", "b", "b-again", "c"}, queuePayloads(s, "dd"), "a retried id is acknowledged, not stored")

		// The window counts from the acceptance, not the item's life.
		for len(s.Items("dd")) > 0 {
			res := s.Lease("dd", 10)
			var ids []string
			for _, it := range res.Items {
				ids = append(ids, it.Id)
			}
			s.Complete("dd", res.Partition, ids...)
		}
		produceDedup(s, "dd", "a-after-complete", "x")
		require.Empty(t, queuePayloads(s, "dd"), "an id is remembered after its item completed")

		produceDedup(s, "other", "a-elsewhere", "x")
		require.Equal(t, []string{"a-elsewhere"}, queuePayloads(s, "other"), "ids are per queue")

		s.Restart()
		produceDedup(s, "dd", "a-after-restart", "x", "c-after-restart", "y")
		require.Empty(t, queuePayloads(s, "dd"), "the window survives a restart")

		s.Advance(queue.DeduplicationWindow - time.Second)
		produceDedup(s, "dd", "a-late", "x")
		require.Empty(t, queuePayloads(s, "dd"), "within the window")
		s.Advance(time.Second)
		produceDedup(s, "dd", "a-new-window", "x", "again", "x")
		require.Equal(t, []string{"a-new-window"}, queuePayloads(s, "dd"), "after the window the id is accepted anew, once")
		s.Advance(queue.DeduplicationWindow - time.Second)
		produceDedup(s, "dd", "a-in-new-window", "x")
		require.Equal(t, []string{"a-new-window"}, queuePayloads(s, "dd"), "the new window counts from the new acceptance")

		// Ended windows are forgotten as produces go on, and the ids
		// accepted meanwhile stay.
		s.Advance(2 * queue.DeduplicationWindow)
		for i := range 50 {
			produceDedup(s, "dd", fmt.Sprint("n", i), fmt.Sprint("n", i))
		}
		s.Restart()
		produceDedup(s, "dd", "n0-again", "n0", "x-again", "x")
		require.Len(t, queuePayloads(s, "dd"), 52, "n0 remembered, x's window over")

		for _, c := range []struct{ id, says string }{
			{strings.Repeat("d", 129), "129 bytes, the limit is 128"},
			{"with space", "byte 4 (0x20)"},
			{"é", "byte 0 (0xc3)"},
		} {
			err := s.C.QueueProduce(ctx, dedupRequest("dd", "bad", c.id))
			servertest.RequireCode(t, err, styx.CodeBadRequest, "items[0].deduplication_id", c.says)
		}
		require.Len(t, queuePayloads(s, "dd"), 52, "a refused produce stores nothing")

		// A deleted queue's ids go with it.
		require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "other"}))
		s.CreateQueue(&pb.QueueInfo{QueueName: "other", LeaseTimeout: "1m"})
		produceDedup(s, "other", "a-in-new-queue", "x")
		require.Equal(t, []string{"a-in-new-queue"}, queuePayloads(s, "other"))
	})
}

// TestDeduplicationWindow: a queue's deduplication_window (1s..24h,
// default 5m) sets how long its ids are remembered; queues.info gives the
// window a queue sets (nothing at the default); queues.update changes it for the ids accepted from then
// on (an id keeps the window it was accepted with); a bad window is
// refused naming the field and the range.
func TestDeduplicationWindow(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "short", LeaseTimeout: "1m", DeduplicationWindow: "1m"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "default", LeaseTimeout: "1m"})
		window := func(q string) string {
			info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: q})
			require.NoError(t, err)
			return info.DeduplicationWindow
		}
		require.Equal(t, "1m0s", window("short"))
		require.Empty(t, window("default"), "the default (5m) is not given")

		produceDedup(s, "short", "a", "x")
		produceDedup(s, "default", "a", "x")
		s.Advance(time.Minute)
		produceDedup(s, "short", "a-after-1m", "x")
		produceDedup(s, "default", "a-after-1m", "x")
		require.Equal(t, []string{"a", "a-after-1m"}, queuePayloads(s, "short"), "a 1m window is over after 1m")
		require.Equal(t, []string{"a"}, queuePayloads(s, "default"), "the default window is not")

		require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "short", DeduplicationWindow: "2h"}))
		s.Restart()
		require.Equal(t, "2h0m0s", window("short"), "kept across a restart")
		s.Advance(time.Hour)
		produceDedup(s, "short", "a-after-1h", "x")
		require.Equal(t, []string{"a", "a-after-1h", "a-after-1m"}, queuePayloads(s, "short"),
			"an id keeps the window it was accepted with (1m)")
		s.Advance(time.Hour)
		produceDedup(s, "short", "a-after-2h", "x")
		require.Equal(t, []string{"a", "a-after-1h", "a-after-1m"}, queuePayloads(s, "short"), "one accepted since has the new window (2h)")
		require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "short", UpdateMask: []string{"deduplication_window"}}))
		require.Empty(t, window("short"), "an empty window in the mask restores the default")

		for _, c := range []struct{ window, says string }{
			{"0s", "0s is out of range 1s..24h0m0s"},
			{"25h", "25h0m0s is out of range 1s..24h0m0s"},
			{"soon", "'soon' is not a duration"},
		} {
			err := s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "bad", LeaseTimeout: "1m", DeduplicationWindow: c.window})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "deduplication_window", c.says)
		}
	})
}

// TestClusterDeduplication: two nodes on one PostgreSQL database producing
// the same deduplication ids at once store each id's item once.
func TestClusterDeduplication(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "dd", LeaseTimeout: "1m", RequestedPartitions: 2})
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
	for _, p := range queuePayloads(nodes[1], "dd") {
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
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFakeWith(t, b, func(c *daemon.Config) { c.MaxDeduplicationIDs = 3 })
		s.CreateQueue(&pb.QueueInfo{QueueName: "dd", LeaseTimeout: "1m", RequestedPartitions: 2, DeduplicationWindow: "1m"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "other", LeaseTimeout: "1m"})
		firstEnds := s.Now().Add(time.Minute)

		produceDedup(s, "dd", "a", "a", "b", "b")
		s.Advance(time.Second)
		// Two new ids where one fits, in items of groups spread over both
		// partitions: nothing of the request is stored.
		req := dedupRequest("dd", "a-again", "a", "c", "c", "d", "d", "no-id", "")
		for i, it := range req.Items {
			it.Group = fmt.Sprint("g", i)
		}
		err := s.C.QueueProduce(ctx, req)
		if b.Postgres() {
			require.NoError(t, err, "postgres keeps its ids in its table: no limit")
			require.Equal(t, []string{"a", "b", "c", "d", "no-id"}, queuePayloads(s, "dd"))
			_, _, body := raw(s, http.MethodGet, "/metrics", "", "", nil)
			require.NotContains(t, string(body), "styx_queue_deduplication_ids{", "not in memory: no gauge")
			return
		}
		servertest.RequireCode(t, err, styx.CodeRetry, "queue 'dd'", "3 deduplication ids", "the server's limit",
			"the oldest window ends by "+ceilSecond(firstEnds))
		require.Equal(t, []string{"a", "b"}, queuePayloads(s, "dd"), "a refused produce stores nothing")

		produceDedup(s, "dd", "c", "c", "no-id", "")
		require.Equal(t, []string{"a", "b", "c", "no-id"}, queuePayloads(s, "dd"), "up to the limit")
		produceDedup(s, "dd", "a-again", "a", "c-again", "c", "no-id-2", "")
		require.Equal(t, []string{"a", "b", "c", "no-id", "no-id-2"}, queuePayloads(s, "dd"),
			"at the limit, ids held still deduplicate and items without an id are stored")
		produceDedup(s, "other", "x", "x")
		require.Equal(t, []string{"x"}, queuePayloads(s, "other"), "the limit is per queue")
		code, _, body := raw(s, http.MethodGet, "/metrics", "", "", nil)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, string(body), `styx_queue_deduplication_ids{queue="dd"} 3`)
		require.Contains(t, string(body), `styx_queue_deduplication_ids{queue="other"} 1`)

		s.Restart()
		servertest.RequireCode(t, s.C.QueueProduce(ctx, dedupRequest("dd", "e", "e")), styx.CodeRetry, "the server's limit")
		produceDedup(s, "dd", "b-again", "b")
		require.Equal(t, []string{"a", "b", "c", "no-id", "no-id-2"}, queuePayloads(s, "dd"), "the ids held survive a restart")

		s.Advance(time.Minute - time.Second) // a's and b's windows end; c's ends in a second
		produceDedup(s, "dd", "e", "e", "f", "f")
		servertest.RequireCode(t, s.C.QueueProduce(ctx, dedupRequest("dd", "a-new-window", "a")), styx.CodeRetry,
			"the oldest window ends by "+ceilSecond(firstEnds.Add(time.Second)))
		s.Advance(time.Second)
		produceDedup(s, "dd", "a-new-window", "a")
		require.Equal(t, []string{"a", "a-new-window", "b", "c", "e", "f", "no-id", "no-id-2"}, queuePayloads(s, "dd"),
			"ended windows make room")
	})
}

// ceilSecond formats t rounded up to the second, as the deduplication
// limit's message does.
func ceilSecond(t time.Time) string {
	return t.Add(time.Second - 1).Truncate(time.Second).UTC().Format(time.RFC3339)
}
