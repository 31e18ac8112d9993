package migrate_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/migrate"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

var ctx = context.Background()

// authServer is a server with --auth and the bootstrap admin key in file
// (s.C sends it), on b; booted by the caller.
func authServer(t *testing.T, b servertest.Backend, file, admin string) *servertest.Server {
	s := &servertest.Server{T: t, B: b}
	s.Configure = func(cfg *daemon.Config) { cfg.Auth, cfg.AdminKeyFile = true, file }
	s.ClientConfig = func(cc *styx.ClientConfig) { cc.APIKey = admin }
	return s
}

// state is what a migrated node must answer as the embedded one did.
type state struct {
	Queues []string
	Stats  map[string][]string
	Dead   []string
	Tasks  []string
	Keys   []string
}

// read reads the state through the Go client.
func read(t *testing.T, c *styx.Client) state {
	t.Helper()
	var st state
	list, err := c.QueuesList(ctx, &pb.QueuesListRequest{Limit: 100})
	require.NoError(t, err)
	st.Stats = map[string][]string{}
	for _, q := range list.Items {
		st.Queues = append(st.Queues, q.QueueName+" dead="+q.DeadQueue+" lease="+q.LeaseTimeout+" expire="+q.ExpireTimeout+
			" parts="+itoa(int64(q.RequestedPartitions))+" max="+itoa(int64(q.MaxAttempts))+" ref="+q.Reference)
		stats, err := c.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: q.QueueName})
		require.NoError(t, err)
		for _, lq := range stats.LogicalQueues {
			for _, p := range lq.Partitions {
				st.Stats[q.QueueName] = append(st.Stats[q.QueueName], "p"+itoa(int64(p.Partition))+" total="+itoa(int64(p.Total))+
					" leased="+itoa(int64(p.TotalLeased))+" failures="+itoa(int64(p.Failures))+" scheduled="+itoa(int64(p.Scheduled)))
			}
		}
		sort.Strings(st.Stats[q.QueueName])
	}
	dead, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "src-dlq", Limit: 1000})
	require.NoError(t, err)
	for _, it := range dead.Items {
		st.Dead = append(st.Dead, it.Id+" "+it.DeadReason+" "+it.SourceQueue+" "+it.LastError+" "+string(it.Payload))
	}
	tasks, err := c.RedrivesList(ctx, &pb.RedrivesListRequest{})
	require.NoError(t, err)
	for _, task := range tasks.Tasks {
		st.Tasks = append(st.Tasks, task.TaskId+" "+task.Status+" "+task.QueueName+" moved="+itoa(task.Moved))
	}
	keys, err := c.KeysList(ctx, &pb.KeysListRequest{})
	require.NoError(t, err)
	for _, k := range keys.Keys {
		st.Keys = append(st.Keys, k.Name+" "+k.CreatedBy+" "+k.CreatedAt.AsTime().String())
	}
	return st
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestMigratePebbleToPostgres fills a Pebble server through the API (items
// ready, leased and scheduled, dead items, a redrive task, API keys),
// stops it, migrates its data directory into a fresh PostgreSQL schema and
// starts a PostgreSQL node on it: queues.list, the item counts, the dead
// items (same ids and last errors), the tasks and the keys are the same;
// a lease handle of the embedded server completes its item on the new
// node. A second migration changes nothing.
func TestMigratePebbleToPostgres(t *testing.T) {
	url := pgtest.URL(t)
	dir := t.TempDir()
	admin := servertest.RandomHex(t, 32)
	file := filepath.Join(t.TempDir(), "admin.key")
	require.NoError(t, os.WriteFile(file, []byte(admin+"\n"), 0o600))
	src := authServer(t, servertest.Backend{Name: daemon.StoragePebble, Open: func(t *testing.T) store.Store {
		s, err := pebble.Open(pebble.Config{Dir: dir, Logger: servertest.TestLogger()})
		require.NoError(t, err)
		return s
	}}, file, admin)
	src.Boot()

	src.CreateQueue(&pb.QueueInfo{QueueName: "src-dlq", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 1})
	src.CreateQueue(&pb.QueueInfo{QueueName: "src", DeadQueue: "src-dlq", LeaseTimeout: "10m", ExpireTimeout: "24h", RequestedPartitions: 1,
		MaxAttempts: 3, Reference: "the source"})
	src.CreateQueue(&pb.QueueInfo{QueueName: "other", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 2})
	payloads := make([]string, 40)
	for i := range payloads {
		payloads[i] = "item-" + itoa(int64(i))
	}
	src.Produce("src", payloads...)
	src.Produce("other", "o1", "o2", "o3")
	require.NoError(t, src.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "other", RequestTimeout: "1m",
		Items: []*pb.QueueProduceItem{{Bytes: []byte("later"), EnqueueAt: timestamppb.New(time.Now().Add(time.Hour))}}}))
	dying := src.Lease("src", 8).Items
	var retries []*pb.QueueRetryItem
	for i, it := range dying {
		retries = append(retries, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "boom " + itoa(int64(i))})
	}
	src.Retry("src", 0, retries...)
	src.WaitItems("src-dlq", 8)
	failed := src.Lease("src", 2).Items
	src.Retry("src", 0, &pb.QueueRetryItem{Id: failed[0].Id, Error: "try again"}, &pb.QueueRetryItem{Id: failed[1].Id, Error: "try again"})
	held := src.Lease("src", 5).Items // leased when the server stops
	dead, err := src.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "src-dlq", Limit: 1})
	require.NoError(t, err)
	task, err := src.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "src-dlq", Filter: &pb.DeadFilter{Ids: []string{dead.Items[0].Id}},
		Destination: "other"})
	require.NoError(t, err)
	servertest.Eventually(t, func() bool {
		got, err := src.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		return err == nil && got.Status == "completed"
	}, "the redrive should complete")
	// The last id the source handed out belongs to an item completed
	// before the migration: it must not come back either.
	src.CreateQueue(&pb.QueueInfo{QueueName: "tail", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 1})
	src.Produce("tail", "done")
	gone := src.Lease("tail", 1).Items[0]
	src.Complete("tail", 0, gone.Id)
	// An ordered queue's group and deduplication ids.
	src.CreateQueue(&pb.QueueInfo{QueueName: "fifo", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 2, Ordered: true})
	fifo := &pb.QueueProduceRequest{QueueName: "fifo", RequestTimeout: "1m"}
	for _, p := range []string{"g-1", "g-2", "g-3"} {
		fifo.Items = append(fifo.Items, &pb.QueueProduceItem{Bytes: []byte(p), Group: "g", DeduplicationId: "dedup-" + p})
	}
	require.NoError(t, src.C.QueueProduce(ctx, fifo))
	src.NewKey("reader", []string{"read"})
	src.NewKey("worker", []string{"produce", "consume"}, "src*")
	want := read(t, src.C)
	require.Len(t, want.Dead, 7)
	require.Len(t, want.Tasks, 1)
	src.Stop()

	run := func() migrate.Result {
		s, err := pebble.Open(pebble.Config{Dir: dir, Logger: servertest.TestLogger()})
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Close()) }()
		require.NoError(t, migrate.Settle(ctx, s, servertest.TestLogger()))
		pg, err := postgres.OpenStore(ctx, url, 4)
		require.NoError(t, err)
		defer func() { _ = pg.Close() }()
		res, err := migrate.Run(ctx, migrate.Config{Source: s, Target: pg})
		require.NoError(t, err)
		return res
	}
	first := run()
	require.Equal(t, 5, first.Queues)
	require.Equal(t, int64(3), first.Dedup)
	require.Equal(t, first.Items, first.Inserted)
	require.Equal(t, 1, first.Tasks)

	dst := authServer(t, servertest.Backend{Name: daemon.StoragePostgres, URL: url}, file, admin)
	dst.Boot()
	require.Equal(t, want, read(t, dst.C))
	dst.Stop()

	again := run()
	require.Equal(t, first.Items, again.Items)
	require.Zero(t, again.Inserted, "a second migration inserts nothing")
	dst.Boot()
	require.Equal(t, want, read(t, dst.C))

	// The deduplication ids hold (nothing is stored twice), and the group
	// is leased in produce order.
	require.NoError(t, dst.C.QueueProduce(ctx, fifo))
	require.Len(t, dst.Items("fifo"), 3)
	for _, p := range []string{"g-1", "g-2", "g-3"} {
		res := dst.Lease("fifo", 1)
		require.Len(t, res.Items, 1)
		require.Equal(t, p, string(res.Items[0].Bytes))
		dst.Complete("fifo", res.Partition, res.Items[0].Id)
	}

	// A lease handle of the embedded server is the item's on PostgreSQL,
	// and new ids come after every id copied.
	require.NoError(t, dst.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "src", Ids: []string{held[0].Id}}))
	dst.Produce("tail", "new")
	require.Greater(t, dst.Items("tail")[0].Id, gone.Id, "an id the embedded server handed out came back")
	dst.Produce("src", "new")
	items := dst.Items("src")
	last := items[len(items)-1]
	require.Equal(t, "new", string(last.Payload))
	for _, it := range items[:len(items)-1] {
		require.Less(t, it.Id, last.Id)
	}
}

// TestMigrateResumes: a migration interrupted after some pages leaves what
// it copied, and the next run copies the rest, doubling nothing.
func TestMigrateResumes(t *testing.T) {
	url := pgtest.URL(t)
	dir := t.TempDir()
	b := servertest.Backend{Name: daemon.StoragePebble, Open: func(t *testing.T) store.Store {
		s, err := pebble.Open(pebble.Config{Dir: dir, Logger: servertest.TestLogger()})
		require.NoError(t, err)
		return s
	}}
	src := &servertest.Server{T: t, B: b}
	src.Boot()
	src.CreateQueue(&pb.QueueInfo{QueueName: "q", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 1})
	var payloads []string
	for i := range 50 {
		payloads = append(payloads, "p-"+itoa(int64(i)))
	}
	src.Produce("q", payloads...)
	src.Stop()

	s, err := pebble.Open(pebble.Config{Dir: dir, Logger: servertest.TestLogger()})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	pg, err := postgres.OpenStore(ctx, url, 4)
	require.NoError(t, err)
	defer func() { _ = pg.Close() }()
	cut, cancel := context.WithCancel(ctx)
	_, err = migrate.Run(cut, migrate.Config{Source: s, Target: pg, PageItems: 10, Progress: func(p migrate.Progress) {
		if p.Items == 20 {
			cancel() // interrupted after two pages
		}
	}})
	require.ErrorIs(t, err, context.Canceled)
	res, err := migrate.Run(ctx, migrate.Config{Source: s, Target: pg, PageItems: 10})
	require.NoError(t, err)
	require.Equal(t, int64(50), res.Items)
	require.Equal(t, int64(30), res.Inserted, "the second run inserts what the first did not")

	dst := &servertest.Server{T: t, B: servertest.Backend{Name: daemon.StoragePostgres, URL: url}}
	dst.Boot()
	t.Cleanup(dst.Stop)
	var got []string
	for _, it := range dst.Items("q") {
		got = append(got, string(it.Payload))
	}
	require.Equal(t, payloads, got)
}
