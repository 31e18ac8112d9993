package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserSQSDeadItemWithoutError (issue 39, 6): an SQS message that
// dies because its visibility was set to 0 once too often carries no
// error text: its DLQ page and item page say "no error recorded", and the
// item page offers no error group for the empty error.
func TestBrowserSQSDeadItemWithoutError(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	ctx := context.Background()
	sqs := awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.Endpoint), Retryer: aws.NopRetryer{},
		HTTPClient: styxtest.AWSHTTPClient(),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		}),
	})
	_, err := sqs.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("mail-dlq")})
	require.NoError(t, err)
	q, err := sqs.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("mail"), Attributes: map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:mail-dlq","maxReceiveCount":"1"}`}})
	require.NoError(t, err)
	_, err = sqs.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(`{"to":"a@example.com"}`),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")}}})
	require.NoError(t, err)
	got, err := sqs.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	_, err = sqs.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl,
		ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 0})
	require.NoError(t, err)
	waitDead(t, srv.Client, "mail-dlq", 1)
	b := newBrowser(t, srv.Endpoint)

	b.open("/ui/queues/mail-dlq/dead")
	b.waitText("main table caption", "1 dead item in 1 group")
	require.Equal(t, []string{"1 | max_attempts | mail | no error recorded"}, b.groupRows())
	require.Equal(t, "no error recorded", b.eval(`document.querySelector('h2#items ~ table tbody tr').cells[7].innerText`))
	b.run(chromedp.Click(`h2#items ~ table tbody tr th a`, chromedp.ByQuery))
	b.waitText("h1", "Dead item ")
	b.waitText("dl.props", "Last error")
	require.Equal(t, "no error recorded", b.prop("Last error"))
	require.Equal(t, "–", b.prop("Error group"), "no group link for an empty error")
	require.Empty(t, b.eval(`document.querySelector('dl.props a[href*="fingerprint="]') ? 'link' : ''`))
}

// prop is the text of the value of the props list's term name.
func (b *browser) prop(name string) string {
	b.t.Helper()
	return b.eval(fmt.Sprintf(`(() => { const dt = [...document.querySelectorAll('dl.props dt')].find((d) => d.innerText.trim() === %q);
		return dt ? dt.nextElementSibling.innerText.trim() : '(no ' + %q + ')'; })()`, name, name))
}

// TestBrowserSmallerTruths39 (issue 39, 7): "1 item per second", "move 1
// item to its source queue", a note that is a sentence, a redrives table
// whose progress stays on one line with one highlight bar and a pill that
// stays a pill, chart lines that meet stay visible, a group's label that
// outlives its items, and /dead of a queue that is no dead-letter queue
// saying why once.
func TestBrowserSmallerTruths39(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "tr-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "tr", DeadQueue: "tr-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "tr-old", DeadQueue: "tr-dlq"})
	_, err := c.QueuesHistory(ctx, &pb.QueuesHistoryRequest{QueueName: "tr-dlq"}) // the groups' starting point
	require.NoError(t, err)
	// LinesThatMeet needs tr's items produced and dead-lettered in one
	// minute of the history (the lines meet where a minute's counts are
	// equal): not across a minute's end.
	withinOneMinute(t, 20*time.Second)
	kill(t, c, "tr", 3, "card declined for payment 7", func(i int) string { return fmt.Sprint(i) })
	kill(t, c, "tr", 1, "order 12 not found", func(int) string { return `{"order":12}` })
	kill(t, c, "tr-old", 2, "timeout after 30s", func(i int) string { return fmt.Sprint(i) })
	waitDead(t, c, "tr-dlq", 6)
	require.NoError(t, c.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "tr-old"}))
	b := newBrowser(t, srv.Endpoint)

	t.Run("LinesThatMeet", func(t *testing.T) {
		b.t = t
		// Every item of tr died: produced and dead-lettered are one line.
		b.open("/ui/queues/tr")
		b.waitText("#chart-rates", "dead-lettered 4 in the last hour")
		legend := b.text("#chart-rates ul.legend")
		require.Contains(t, legend, "produced 4 in the last hour")
		require.Contains(t, legend, "dead-lettered 4 in the last hour")
		style := func(sel, prop string) string {
			return b.eval(fmt.Sprintf(`(() => { const el = document.querySelector(%q); return el ? getComputedStyle(el)[%q] : '(none)'; })()`, sel, prop))
		}
		require.NotEqual(t, "none", style("#chart-rates .s2", "strokeDasharray"), "dead-lettered is drawn dashed over produced")
		require.Equal(t, "none", style("#chart-rates .s0", "strokeDasharray"))
		width := func(sel string) float64 {
			var w float64
			b.run(chromedp.Evaluate(fmt.Sprintf(`parseFloat(getComputedStyle(document.querySelector(%q)).strokeWidth)`, sel), &w))
			return w
		}
		require.Greater(t, width("#chart-rates .s0"), width("#chart-rates .s2"), "produced is drawn wider beneath")
		require.Equal(t, "dashed", style("#chart-rates .legend .key.s2", "borderTopStyle"), "the legend's key is dashed too")
		require.Equal(t, "none", style("#chart-rates .s1", "strokeDasharray"), "completed (0) meets no line above zero")
	})

	t.Run("DeadOfAQueueThatIsNoDLQ", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/tr/dead")
		b.waitText("main", "is not a dead-letter queue")
		require.Equal(t, "1", b.eval(`String(document.querySelector('main').innerText.split('is not a dead-letter queue').length - 1)`),
			"the reason is said once: %s", b.text("main"))
		require.Contains(t, b.text("main"), "Dead items are not shown: ")
	})

	t.Run("GroupLabelOutlivesItsItems", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/tr-dlq/dead")
		b.waitText("#chart-groups", "card declined for payment <n> 3 in the last hour")
		g, err := c.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "tr-dlq"})
		require.NoError(t, err)
		var fp string
		for _, x := range g.Groups {
			if strings.HasPrefix(x.Pattern, "card declined") {
				fp = x.Fingerprint
			}
		}
		require.NotEmpty(t, fp)
		res, err := c.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "tr-dlq", Filter: &pb.DeadFilter{Fingerprint: fp}})
		require.NoError(t, err)
		require.EqualValues(t, 3, res.Deleted)
		b.waitText("main table caption", "3 dead items in 2 groups") // the page updated itself
		b.waitText("#chart-groups", "card declined for payment <n> 3 in the last hour")
		require.NotContains(t, b.text("#chart-groups"), fp)
	})

	t.Run("OneItemToItsSourceQueue", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/tr-dlq/dead?error=order")
		b.waitText("main", "Dead items matching")
		b.run(chromedp.Click(`h2#items ~ table tbody tr th a`, chromedp.ByQuery))
		b.waitText("h1", "Dead item ")
		b.run(chromedp.Click(`//button[text()="Redrive this item…"]`))
		b.waitDialog("This will move 1 item to its source queue.")
		require.Equal(t, "Redrive 1 item", b.text("#confirm-ok"))
		b.run(chromedp.SetValue(`#redrive-rate`, "1", chromedp.ByQuery), chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText("h1", "Redrives")
		b.waitText(`tr[aria-current="true"]`, "completed")
		b.run(chromedp.Click(`tr[aria-current="true"] th a`, chromedp.ByQuery))
		b.waitText("h1", "Redrive rd-")
		require.Equal(t, "1 item per second", b.prop("Rate limit"))
	})

	t.Run("RedrivesTable", func(t *testing.T) {
		b.t = t
		// The 2 items of tr-old stay: their queue is gone. A filter of
		// several parts makes the Items column long, which squeezes the
		// other columns.
		task, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "tr-dlq",
			Filter: &pb.DeadFilter{SourceQueue: "tr-old", Reason: "explicit", ErrorContains: "timeout after", Kind: "payment"}})
		require.NoError(t, err)
		b.open("/ui/redrives?task=" + task.TaskId)
		b.waitText(`tr[aria-current="true"]`, "completed with warnings")
		row := `document.querySelector('tr[aria-current="true"]')`
		require.Equal(t, "0 of 2 moved · 2 skipped", b.eval(row+`.querySelector('.progress-text').innerText`))
		require.Equal(t, "1", b.eval(`String(new Set([...`+row+`.querySelector('.progress-text').getClientRects()].map((r) => Math.round(r.top))).size)`),
			"the progress numbers stay on one line")
		require.Equal(t, "tabular-nums", b.eval(`getComputedStyle(`+row+`.querySelector('.progress-text')).fontVariantNumeric`))
		require.Equal(t, "pill", b.eval(`(() => { const p = `+row+`.querySelector('.badge');
			return p.getBoundingClientRect().height <= parseFloat(getComputedStyle(p).lineHeight) + 3 ? 'pill' : 'oval: ' + p.getBoundingClientRect().height; })()`),
			"'completed with warnings' stays on one line")
		shadows := b.eval(`[...` + row + `.cells].map((c) => getComputedStyle(c).boxShadow === 'none' ? 'none' : 'bar').join(' ')`)
		require.Equal(t, "bar"+strings.Repeat(" none", 7), shadows, "one highlight bar, at the row's start")
		require.Equal(t, "fits", b.eval(`document.documentElement.scrollWidth <= innerWidth ? 'fits' : 'wider than the window: ' + document.documentElement.scrollWidth`))
	})

	t.Run("NoteIsASentence", func(t *testing.T) {
		b.t = t
		b.open("/ui/redrives/rd-33lbaqj1g9tnu")
		b.waitText("main", "The task is not shown: ")
	})
}

// withinOneMinute waits, when less than need is left of the current
// minute, for the next one to start, so that what the test does in the
// next need falls in one minute of the queues' history. The wall clock
// gives no signal to wait on.
func withinOneMinute(t *testing.T, need time.Duration) {
	t.Helper()
	now := time.Now()
	if next := now.Truncate(time.Minute).Add(time.Minute); next.Sub(now) < need {
		time.Sleep(next.Sub(now))
	}
}
