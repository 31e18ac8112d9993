package web_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserDeadRecordAndAttributes (issue 39, 1 and 6): an SQS message
// dead without an error text, then received in its dead-letter queue (a
// receive whose visibility runs out, one set back to 0) and leased and
// retried there through /v1. Its item page keeps the dead record as it was
// ("no error recorded", no group link), shows the three DLQ attempts apart,
// and shows the message's MessageId, SentTimestamp and message attributes,
// user data as text.
func TestBrowserDeadRecordAndAttributes(t *testing.T) {
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
	dlq, err := sqs.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("mail-dlq")})
	require.NoError(t, err)
	q, err := sqs.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("mail"), Attributes: map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:mail-dlq","maxReceiveCount":"1"}`}})
	require.NoError(t, err)
	str := func(t, v string) sqstypes.MessageAttributeValue {
		return sqstypes.MessageAttributeValue{DataType: aws.String(t), StringValue: aws.String(v)}
	}
	sent, err := sqs.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(`{"to":"a@example.com"}`),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			"tenant": str("String", "acme"), "priority": str("Number", "5"),
			"note": str("String", `<img src=x onerror="document.title='owned'">`),
			"blob": {DataType: aws.String("Binary"), BinaryValue: []byte{1, 2, 3}},
		}})
	require.NoError(t, err)
	got, err := sqs.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	_, err = sqs.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl,
		ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 0})
	require.NoError(t, err)
	waitDead(t, srv.Client, "mail-dlq", 1)

	// DLQ attempt 1: a receive whose visibility timeout runs out; the next
	// receive waits for it. DLQ attempt 2: that receive's visibility set
	// back to 0 (no error text).
	got, err = sqs.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: dlq.QueueUrl, VisibilityTimeout: 1})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	got, err = sqs.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: dlq.QueueUrl, WaitTimeSeconds: 10})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1, "the first receive's visibility ran out")
	_, err = sqs.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: dlq.QueueUrl,
		ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 0})
	require.NoError(t, err)
	// DLQ attempt 3: leased and retried with an error through /v1.
	leased, err := srv.Client.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "mail-dlq", BatchSize: 1, ClientId: "on-call", RequestTimeout: "5s"})
	require.NoError(t, err)
	require.Len(t, leased.Items, 1)
	_, err = srv.Client.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "mail-dlq", Partition: leased.Partition,
		Items: []*pb.QueueRetryItem{{Id: leased.Items[0].Id, Error: "looked at by on-call"}}})
	require.NoError(t, err)

	b := newBrowser(t, srv.Endpoint)
	b.open("/ui/queues/mail-dlq/dead")
	b.waitText("main table caption", "1 dead item in 1 group")
	require.Equal(t, []string{"1 | max_attempts | mail | no error recorded"}, b.groupRows(), "the group is the one the item died in")
	b.run(chromedp.Click(`h2#items ~ table tbody tr th a`, chromedp.ByQuery))
	b.waitText("h1", "Dead item ")
	b.waitText("main", "Attempts in this dead-letter queue")

	require.Equal(t, "no error recorded", b.prop("Last error"), "the dead record is unchanged")
	require.Equal(t, "–", b.prop("Error group"))
	require.Equal(t, "3", b.prop("DLQ attempts"))
	require.Equal(t, "4 (3 in this dead-letter queue)", b.prop("Attempts"), "1 in mail, 3 in mail-dlq")
	require.Equal(t, "No attempt errors were recorded.", b.eval(`document.querySelector('ol.timeline[aria-label^="Attempt errors"]') ? 'a list' :
		[...document.querySelectorAll('h2')].find((h) => h.innerText.startsWith('Attempt errors')).nextElementSibling.innerText`))
	dlqAttempts := b.eval(`[...document.querySelectorAll('ol[aria-label="DLQ attempts, oldest first"] li')].map((li) => li.innerText.replace(/ · .*\n/, ' · ')).join('\n')`)
	require.Equal(t, "DLQ attempt 1 · lease expired after 30s\nDLQ attempt 2 · no error recorded\nDLQ attempt 3 · looked at by on-call", dlqAttempts)

	attrs := b.eval(`[...document.querySelectorAll('h2#attributes + table tbody tr')].map((r) => [...r.cells].map((c) => c.innerText.trim()).join(' | ')).join('\n')`)
	require.Equal(t, "SQS message | MessageId | – | "+aws.ToString(sent.MessageId)+"\n"+
		"SQS message | SentTimestamp | – | "+b.eval(`document.querySelector('h2#attributes + table tbody tr:nth-child(2) td:last-child').innerText`)+"\n"+
		"SQS message attribute | blob | Binary | AQID\n"+
		`SQS message attribute | note | String | <img src=x onerror="document.title='owned'">`+"\n"+
		"SQS message attribute | priority | Number | 5\n"+
		"SQS message attribute | tenant | String | acme", attrs)
	require.Regexp(t, `^\d{13}$`, b.eval(`document.querySelector('h2#attributes + table tbody tr:nth-child(2) td:last-child').innerText`), "SentTimestamp in Unix ms")
	require.Equal(t, "0", b.eval(`String(document.querySelectorAll('main img').length)`), "attribute values are text, never markup")
	require.NotEqual(t, "owned", b.eval(`document.title`))
	b.screenshot("item-sqs")
}
