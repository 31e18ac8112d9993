package clusters_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/metrics"
	pb "github.com/styxq/styx/styxpb"
)

func TestMain(m *testing.M) { servertest.Main(m) }

var ctx = context.Background()

// node starts a server on the catalog cluster mainURL with the other
// clusters others (name: URL) and the weights given.
func node(t *testing.T, mainURL string, others map[string]string, weights map[string]int) *servertest.Server {
	return servertest.StartWith(t, servertest.Backend{Name: daemon.StoragePostgres, URL: mainURL}, func(c *daemon.Config) {
		c.PostgresClusters, c.PostgresClusterWeights = others, weights
	})
}

// health returns GET /health's status code and answer.
func health(t *testing.T, s *servertest.Server) (int, map[string]any) {
	t.Helper()
	res, err := http.Get(s.Endpoint + "/health")
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out), string(b))
	return res.StatusCode, out
}

// leaseAll leases and completes items of q on s until stop is closed and
// q is empty, recording every id leased in seen (failing on a second
// lease of one).
func leaseAll(t *testing.T, s *servertest.Server, q string, seen *sync.Map, total *int64, mu *sync.Mutex, done <-chan struct{}) {
	for {
		res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: q, BatchSize: 10, ClientId: "c", RequestTimeout: "200ms"})
		if err != nil && styx.ErrorCode(err) != styx.CodeRetry {
			t.Errorf("lease %s: %v", q, err)
			return
		}
		if res == nil || len(res.Items) == 0 {
			select {
			case <-done:
				return
			default:
				continue
			}
		}
		ids := make([]string, 0, len(res.Items))
		for _, it := range res.Items {
			if _, dup := seen.LoadOrStore(q+"/"+it.Id, true); dup {
				t.Errorf("item %s of %s leased twice", it.Id, q)
			}
			ids = append(ids, it.Id)
		}
		if err := s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: q, Partition: res.Partition, Ids: ids, RequestTimeout: "30s"}); err != nil {
			t.Errorf("complete %s: %v", q, err)
			return
		}
		mu.Lock()
		*total += int64(len(ids))
		mu.Unlock()
	}
}

// TestTwoClusters runs two nodes over two clusters, the shared test
// PostgreSQL (main, the catalog) and a private one (east): placement
// (explicit and by weight), info and list naming the cluster, the
// dead_queue rule across clusters, dead items moved to a dead-letter queue
// on the other cluster (also while it is down: moved once it is back), both nodes producing and leasing on
// both clusters (no item leased twice, nothing lost), ids that never
// collide, an interrupted create finished and one undone, and east
// stopped while main's queues serve and /health says which.
func TestTwoClusters(t *testing.T) {
	t.Parallel()
	mainURL := pgtest.URL(t)
	east := pgtest.StartServer(t)
	others := map[string]string{"east": east.URL}
	a := node(t, mainURL, others, nil)
	// b puts every queue created without a cluster on east.
	b := node(t, mainURL, others, map[string]int{"main": 0})

	// Placement, explicit; info on the other node; list.
	a.CreateQueue(&pb.QueueInfo{QueueName: "qm", Cluster: "main"})
	a.CreateQueue(&pb.QueueInfo{QueueName: "qe", Cluster: "east"})
	info, err := b.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "qe"})
	require.NoError(t, err)
	require.Equal(t, "east", info.Cluster)
	b.CreateQueue(&pb.QueueInfo{QueueName: "qw"}) // by weight: main's is 0
	info, err = a.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "qw"})
	require.NoError(t, err)
	require.Equal(t, "east", info.Cluster)
	list, err := a.C.QueuesList(ctx, &pb.QueuesListRequest{})
	require.NoError(t, err)
	got := map[string]string{}
	for _, q := range list.Items {
		got[q.QueueName] = q.Cluster
	}
	require.Equal(t, map[string]string{"qm": "main", "qe": "east", "qw": "east"}, got)

	// Refusals: an unknown cluster, a name taken on the other cluster; a
	// queue created without a cluster and with a dead_queue goes with its
	// dead_queue.
	servertest.RequireCode(t, a.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "qx", Cluster: "west"}), 400, "cluster", "west")
	servertest.RequireCode(t, b.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "qe", Cluster: "main"}), 400, "already exists")
	b.CreateQueue(&pb.QueueInfo{QueueName: "qmd", DeadQueue: "qm"})
	info, err = a.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "qmd"})
	require.NoError(t, err)
	require.Equal(t, "main", info.Cluster)
	servertest.RequireCode(t, b.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "qm"}), 400, "qmd")
	servertest.RequireCode(t, a.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "qe", Cluster: "main"}), 400, "cluster")

	// Concurrent creates on one node, more than its pool of main's
	// connections: each waits for the catalog lock without taking the pool
	// the step holding it needs.
	var creates sync.WaitGroup
	for i := range 12 {
		creates.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			c := []string{"main", "east"}[i%2]
			if err := a.C.QueuesCreate(cctx, &pb.QueueInfo{QueueName: fmt.Sprintf("c%d", i), Cluster: c}); err != nil {
				t.Errorf("create c%d on %s: %v", i, c, err)
			}
		})
	}
	creates.Wait()
	for i := range 12 {
		require.NoError(t, a.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: fmt.Sprintf("c%d", i)}))
	}

	// Both nodes produce into both clusters' queues while both lease.
	const perNode = 200
	var seen sync.Map
	var mu sync.Mutex
	var leased int64
	done := make(chan struct{})
	var consumers sync.WaitGroup
	for _, s := range []*servertest.Server{a, b} {
		for _, q := range []string{"qm", "qe"} {
			consumers.Go(func() { leaseAll(t, s, q, &seen, &leased, &mu, done) })
		}
	}
	var producers sync.WaitGroup
	for n, s := range []*servertest.Server{a, b} {
		for _, q := range []string{"qm", "qe"} {
			producers.Go(func() {
				for i := 0; i < perNode; i += 10 {
					req := &pb.QueueProduceRequest{QueueName: q, RequestTimeout: "30s"}
					for j := range 10 {
						req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: fmt.Appendf(nil, "%d-%d", n, i+j)})
					}
					if err := s.C.QueueProduce(ctx, req); err != nil {
						t.Errorf("produce %s: %v", q, err)
						return
					}
				}
			})
		}
	}
	producers.Wait()
	servertest.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return leased >= 4*perNode
	}, "every item leased and completed")
	close(done)
	consumers.Wait()
	require.Equal(t, int64(4*perNode), leased)

	// Ids: each cluster's are its number modulo 64, so never the same.
	residues := map[string]map[uint64]bool{"qm": {}, "qe": {}}
	seen.Range(func(k, _ any) bool {
		q, id, _ := strings.Cut(k.(string), "/")
		n, err := queue.ParseID("id", id)
		require.NoError(t, err)
		residues[q][n%postgres.MaxClusters] = true
		return true
	})
	require.Len(t, residues["qm"], 1, "main's ids share one residue")
	require.Len(t, residues["qe"], 1, "east's ids share one residue")
	require.NotEqual(t, residues["qm"], residues["qe"], "the clusters' residues differ")

	// An interrupted create: a placement left "creating" whose queue
	// exists on its home is finished; one whose queue does not is undone.
	half, err := postgres.Open(ctx, postgres.Config{URL: east.URL, Metrics: metrics.New(), Log: servertest.TestLogger()})
	require.NoError(t, err)
	require.NoError(t, half.Create(ctx, queue.QueueInfo{Name: "half", Namespace: queue.DefaultNamespace, LeaseTimeout: time.Minute,
		ExpireTimeout: time.Hour, Partitions: 1}))
	half.Close()
	conn, err := pgx.Connect(ctx, mainURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO styx_placements (queue, cluster, state) VALUES ('half', 'east', 'creating'), ('ghost', 'east', 'creating')`)
	require.NoError(t, err)
	b.CreateQueue(&pb.QueueInfo{QueueName: "after", Cluster: "main"}) // a catalog step resolves them
	info, err = a.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "half"})
	require.NoError(t, err)
	require.Equal(t, "east", info.Cluster)
	a.CreateQueue(&pb.QueueInfo{QueueName: "ghost", Cluster: "main"}) // the name is free again

	// The dead-letter move across clusters (ADR 0023, the two phases): qx
	// on main sends its dead items to qed on east.
	a.CreateQueue(&pb.QueueInfo{QueueName: "qed", Cluster: "east"})
	b.CreateQueue(&pb.QueueInfo{QueueName: "qx", Cluster: "main", DeadQueue: "qed"})
	a.Produce("qx", "d1", "d2")
	dying := a.Lease("qx", 2)
	require.Len(t, dying.Items, 2)
	_, err = a.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "qx", Partition: dying.Partition,
		Items: []*pb.QueueRetryItem{{Id: dying.Items[0].Id, Dead: true, Error: "bad"}}})
	require.NoError(t, err)
	dead := b.List("qed", b.C.StorageItemsList)
	require.Len(t, dead, 1, "answered once in the dead-letter queue")
	require.Equal(t, "qx", dead[0].SourceQueue)
	require.Equal(t, "bad", dead[0].LastError)
	require.Len(t, a.List("qx", a.C.StorageItemsList), 1, "and gone from its queue")

	// /health names each cluster; east stopped: 200 degraded naming it,
	// main's queues serve, east's answer 453.
	code, h := health(t, a)
	require.Equal(t, 200, code)
	require.Equal(t, "ok", h["status"])
	require.Equal(t, map[string]any{"main": "ok", "east": "ok"}, h["clusters"])
	// Frozen, not stopped: a stopped server's port may be taken by another
	// test's new cluster, which the node would then reach under east's URL.
	thaw := east.Freeze(t)
	servertest.Eventually(t, func() bool {
		code, h = health(t, b)
		return code == 200 && strings.Contains(fmt.Sprint(h["status"]), "east")
	}, "health names east as down")
	require.Contains(t, h["status"], "degraded")
	res, err := http.Get(b.Endpoint + "/metrics")
	require.NoError(t, err)
	metricsText, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Contains(t, string(metricsText), `styx_postgres_cluster_up{cluster="east"} 0`)
	require.Contains(t, string(metricsText), `styx_postgres_cluster_up{cluster="main"} 1`)
	require.Equal(t, "ok", h["clusters"].(map[string]any)["main"])
	a.Produce("qm", "x")
	require.Len(t, a.Lease("qm", 1).Items, 1)
	// A dead item of qx while qed's cluster is down: not answered success,
	// kept in qx (dying, never leased) until east is back.
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = a.C.QueueRetry(rctx, &pb.QueueRetryRequest{QueueName: "qx", Partition: dying.Partition,
		Items: []*pb.QueueRetryItem{{Id: dying.Items[1].Id, Dead: true, Error: "worse"}}})
	cancel()
	require.Error(t, err)
	require.Len(t, a.List("qx", a.C.StorageItemsList), 1)
	err = b.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "qe", RequestTimeout: "2s",
		Items: []*pb.QueueProduceItem{{Bytes: []byte("y")}}})
	servertest.RequireCode(t, err, 453)
	list, err = b.C.QueuesList(ctx, &pb.QueuesListRequest{})
	require.NoError(t, err, "list names east's queues as last listed")
	require.Len(t, list.Items, 9)
	thaw()
	servertest.Eventually(t, func() bool {
		return b.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "qe", RequestTimeout: "2s",
			Items: []*pb.QueueProduceItem{{Bytes: []byte("y")}}}) == nil
	}, "east's queues serve again")
	servertest.Eventually(t, func() bool {
		return len(a.List("qx", a.C.StorageItemsList)) == 0 && len(b.List("qed", b.C.StorageItemsList)) == 2
	}, "the dead item moves once east is back, once")
}

// TestThreeClusters: a queue of a deployment of one cluster placed on main
// when clusters are added; a queue on each of three clusters, their ids
// of three residues; the clusters' numbers are stored, not derived from the
// configuration: a node started without east keeps west's number, and
// east's queue answers 453 there (its cluster is not configured) while
// the others serve.
func TestThreeClusters(t *testing.T) {
	t.Parallel()
	mainURL := pgtest.URL(t)
	// A deployment of one cluster first: its queue is placed on main when
	// the clusters are added (the catalog's reconciliation), items kept.
	one := node(t, mainURL, nil, nil)
	one.CreateQueue(&pb.QueueInfo{QueueName: "old"})
	one.Produce("old", "kept")
	one.Stop()
	east, west := pgtest.StartServer(t), pgtest.StartServer(t)
	s := node(t, mainURL, map[string]string{"east": east.URL, "west": west.URL}, nil)
	info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "old"})
	require.NoError(t, err)
	require.Equal(t, "main", info.Cluster)
	require.Equal(t, "kept", string(s.Lease("old", 1).Items[0].Bytes))
	residues := map[string]uint64{}
	for _, c := range []string{"main", "east", "west"} {
		q := "q-" + c
		s.CreateQueue(&pb.QueueInfo{QueueName: q, Cluster: c})
		s.Produce(q, "a", "b")
		res := s.Lease(q, 2)
		require.Len(t, res.Items, 2)
		for _, it := range res.Items {
			id, err := queue.ParseID("id", it.Id)
			require.NoError(t, err)
			residues[c] = id % postgres.MaxClusters
		}
	}
	require.Len(t, map[uint64]bool{residues["main"]: true, residues["east"]: true, residues["west"]: true}, 3, "%v", residues)
	require.Equal(t, uint64(0), residues["main"])
	s.Stop()

	s2 := node(t, mainURL, map[string]string{"west": west.URL}, nil)
	s2.Produce("q-west", "c")
	res := s2.Lease("q-west", 1)
	require.Len(t, res.Items, 1)
	id, err := queue.ParseID("id", res.Items[0].Id)
	require.NoError(t, err)
	require.Equal(t, residues["west"], id%postgres.MaxClusters, "west keeps its number")
	err = s2.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "q-east", RequestTimeout: "2s", Items: []*pb.QueueProduceItem{{Bytes: []byte("x")}}})
	servertest.RequireCode(t, err, 453, "east")
	s2.Produce("q-main", "d")
}
