package service_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestPostgresRedriveLostDeleteCounted (issue 53: "a redrive resumed across
// a failover reported moved 398 of 400 (all 400 were back once)"): a node
// reaches PostgreSQL through pgProxy, which forwards the COMMIT of the
// redrive step's delete from the dead-letter queue and cuts the connection
// instead of relaying PostgreSQL's answer (COMMIT: the delete is done, the
// node is told 453 "commit outcome unknown"). The task runs the step again
// and completes, reporting every one of the 400 items moved, and each is
// in its source queue once. On main it reported moved 0 of 400: the items
// the lost delete took were never counted.
func TestPostgresRedriveLostDeleteCounted(t *testing.T) {
	base := pgtest.URL(t)
	proxy := startPGProxy(t, pgHost(t, base))
	s := servertest.Start(t, servertest.Backend{Name: "postgres", URL: proxy.url(base)})
	const n = 400
	dlq := withExpiredDead(s, "rc", n)
	cut := proxy.arm("AND NOT ($4 AND t.state=1)", true) // deleteRefs: the step's delete
	task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true})
	require.NoError(t, err)
	select {
	case tag := <-cut:
		require.Equal(t, "COMMIT", tag, "the delete committed; its answer was cut")
	case <-time.After(30 * time.Second):
		t.Fatal("the proxy saw no COMMIT of the step's delete")
	}
	done := waitTask(s, task.TaskId)
	require.Equal(t, "completed", done.Status, done.FailureReason)
	require.EqualValues(t, n, done.Moved, "every item moved is counted")
	require.Zero(t, done.Skipped)
	require.Zero(t, done.Failed)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprint(i)
	}
	requireOnce(s, "rc", want)
	require.Empty(t, s.Items(dlq))
}
