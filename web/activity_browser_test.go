package web_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserActivityAndExpiring (issue 49): a dead-letter queue's page and
// its queue page show an Activity panel (who deleted, redrove, edited, and
// when, with how many), and the DLQ page warns of dead items that expire
// within a day.
func TestBrowserActivityAndExpiring(t *testing.T) {
	t.Parallel()
	d, c := startAuth(t)
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "act-dlq", ExpireTimeout: "12h"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "act", DeadQueue: "act-dlq"})
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "act", RequestTimeout: "5s",
		Items: []*pb.QueueProduceItem{{Utf8: "a"}, {Utf8: "b"}, {Utf8: "c"}}}))
	lease, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "act", BatchSize: 3, ClientId: "w", RequestTimeout: "5s"})
	require.NoError(t, err)
	require.Len(t, lease.Items, 3)
	var retry []*pb.QueueRetryItem
	for _, it := range lease.Items {
		retry = append(retry, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "boom"})
	}
	_, err = c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "act", Partition: lease.Partition, Items: retry})
	require.NoError(t, err)
	waitDead(t, c, "act-dlq", 3)
	oncallKey, err := c.KeysCreate(ctx, &pb.KeysCreateRequest{Name: "oncall", Scopes: []string{"dead", "read"}})
	require.NoError(t, err)
	oncall, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint(), APIKey: oncallKey.Key})
	require.NoError(t, err)
	t.Cleanup(oncall.Close)
	list, err := oncall.DeadList(ctx, &pb.DeadListRequest{QueueName: "act-dlq"})
	require.NoError(t, err)
	require.Len(t, list.Items, 3)
	_, err = oncall.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "act-dlq", Filter: &pb.DeadFilter{Ids: []string{list.Items[0].Id}}})
	require.NoError(t, err)
	task, err := oncall.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "act-dlq", Filter: &pb.DeadFilter{Ids: []string{list.Items[1].Id}}})
	require.NoError(t, err)
	_, err = oncall.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "act-dlq", Id: list.Items[2].Id, Payload: []byte("fixed")})
	require.NoError(t, err)
	waitDead(t, c, "act-dlq", 1) // the redrive moved its item

	b := newBrowser(t, d.Endpoint())
	b.useKey("/ui/queues/act-dlq/dead", oncallKey.Key)
	b.waitText("#activity table", "Edited a dead item")
	rows := strings.Split(b.eval(`[...document.querySelectorAll('#activity tbody tr')].map((r) => [...r.cells].slice(1).map((c) => c.innerText).join(' | ')).join('\n')`), "\n")
	require.Len(t, rows, 4, "edit, redrive, delete, and its creation by the admin key: %v", rows)
	require.Equal(t, "oncall | Edited a dead item | item "+list.Items[2].Id+", payload now 5 bytes", rows[0])
	require.Equal(t, "oncall | Started a redrive | 1 item matched, task "+task.TaskId, rows[1])
	require.Equal(t, "oncall | Deleted dead items | 1 item", rows[2])
	require.Equal(t, "bootstrap-admin | Created the queue | –", rows[3])
	require.Equal(t, "/ui/redrives/"+task.TaskId, b.eval(`document.querySelector('#activity a[href^="/ui/redrives/"]').getAttribute('href')`))

	// The remaining dead item dies of age in 12 hours: the page warns.
	b.waitText("#expiring-dead", "1 item will expire within a day.")
	require.Contains(t, b.text("#expiring-dead"), "act-dlq's retention")
	b.screenshot("dead-activity")

	// The queue's page has the panel too.
	b.open("/ui/queues/act")
	b.waitText("#activity", "Created the queue")
	require.Equal(t, "none", b.eval(`document.querySelector('#expiring-dead') ? 'shown' : 'none'`))
}
