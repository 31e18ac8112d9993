package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserChartsAfterRestart (issue 39, 5): the charts an operator opens
// after a restart still show the minutes before it (the history is kept in
// the store): the overview's and a queue's produced, completed and depth,
// and the DLQ's arrivals by error group.
func TestBrowserChartsAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	boot := func() (*daemon.Daemon, *styx.Client) {
		t.Helper()
		d, err := daemon.New(ctx, daemon.Config{Listen: "127.0.0.1:0", Storage: daemon.StoragePebble, DataDir: dir,
			ShutdownTimeout: 2 * time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		c, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint()})
		require.NoError(t, err)
		return d, c
	}
	d, c := boot()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "rs-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "rs", DeadQueue: "rs-dlq"})
	_, err := c.QueuesHistory(ctx, &pb.QueuesHistoryRequest{QueueName: "rs-dlq"}) // the groups' starting point
	require.NoError(t, err)
	kill(t, c, "rs", 3, "timeout after 30s", func(i int) string { return fmt.Sprint(i) })
	waitDead(t, c, "rs-dlq", 3)
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "rs", RequestTimeout: "10s",
		Items: []*pb.QueueProduceItem{{Utf8: "a"}, {Utf8: "b"}, {Utf8: "c"}, {Utf8: "d"}}}))
	res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "rs", BatchSize: 1, ClientId: "t", RequestTimeout: "5s"})
	require.NoError(t, err)
	require.NoError(t, c.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "rs", Partition: res.Partition, Ids: []string{res.Items[0].Id}}))

	// The restart.
	c.Close()
	require.NoError(t, d.Close(ctx))
	d, c = boot()
	t.Cleanup(func() {
		c.Close()
		_ = d.Close(context.Background())
	})
	b := newBrowser(t, d.Endpoint())

	b.open("/ui/")
	b.waitText("#chart-rates", "produced 7 in the last hour")
	require.Contains(t, b.text("#chart-rates"), "completed 1 in the last hour")
	require.Contains(t, b.text("#chart-rates"), "dead-lettered 3 in the last hour")
	b.waitText("#chart-depth", "depth 3 now") // 3 in rs; the overview leaves out the 3 dead items rs-dlq holds

	b.open("/ui/queues/rs")
	b.waitText("#chart-rates", "produced 7 in the last hour")
	require.Contains(t, b.text("#chart-rates"), "completed 1 in the last hour")
	b.waitText("#chart-depth", "depth 3 now")

	b.open("/ui/queues/rs-dlq/dead")
	b.waitText("#chart-groups", "timeout after <dur> 3 in the last hour")
}
