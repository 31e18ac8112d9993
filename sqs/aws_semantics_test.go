package sqs_test

// Issue 37, "SQS semantics that differ from AWS today": each rule where
// Styx answered otherwise than AWS, through the Go SDK, on every backend.

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
)

// TestSQSDeleteAfterVisibilityTimeout: DeleteMessage with the latest
// receipt handle deletes the message after its visibility timeout has
// passed, as long as nobody received it since (AWS's rule); a handle of an
// older receive deletes nothing.
func TestSQSDeleteAfterVisibilityTimeout(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("overrun"),
			Attributes: map[string]string{"VisibilityTimeout": "1"}})
		require.NoError(t, err)
		receive := func() types.Message {
			t.Helper()
			got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5})
			require.NoError(t, err)
			require.Len(t, got.Messages, 1)
			return got.Messages[0]
		}

		// A handler that overran its visibility timeout deletes its message.
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("slow")})
		require.NoError(t, err)
		m := receive()
		visibleAgain(t, c, q.QueueUrl)
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle})
		require.NoError(t, err)
		require.Empty(t, s.Items("overrun"), "the latest handle deletes after the visibility timeout")

		// Received again since: the first handle deletes nothing, while the
		// second receive holds the message and after it has ended too.
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("twice")})
		require.NoError(t, err)
		m1 := receive()
		visibleAgain(t, c, q.QueueUrl)
		m2 := receive()
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m1.ReceiptHandle})
		require.NoError(t, err)
		require.Len(t, s.Items("overrun"), 1, "an older handle deletes nothing while another receive holds the message")
		visibleAgain(t, c, q.QueueUrl)
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m1.ReceiptHandle})
		require.NoError(t, err)
		require.Len(t, s.Items("overrun"), 1, "an older handle deletes nothing after the newer receive ended")
		// The latest one does, in a batch too.
		del, err := c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl,
			Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("m2"), ReceiptHandle: m2.ReceiptHandle}}})
		require.NoError(t, err)
		require.Len(t, del.Successful, 1)
		require.Empty(t, del.Failed)
		require.Empty(t, s.Items("overrun"))

		// After a visibility change to 0 (visible at once) the handle is
		// still the latest one.
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("given back")})
		require.NoError(t, err)
		m = receive()
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		require.NoError(t, err)
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle})
		require.NoError(t, err)
		require.Empty(t, s.Items("overrun"))
	})
}

// visibleAgain waits until the one message of queue url, received with a
// visibility timeout, is visible again: its timeout has passed and
// ApproximateNumberOfMessages shows it (1). Polls every 10 ms for up to
// 10 s (eventually).
func visibleAgain(t *testing.T, c *awssqs.Client, url *string) {
	t.Helper()
	servertest.Eventually(t, func() bool {
		a, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url,
			AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages"}})
		require.NoError(t, err)
		return a.Attributes["ApproximateNumberOfMessages"] == "1"
	}, "the message should be visible again")
}

// TestSQSChangeVisibilityNotInflight: a visibility change of a message
// that is not in flight is MessageNotInflight.
func TestSQSChangeVisibilityNotInflight(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("visible")})
		require.NoError(t, err)
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("x")})
		require.NoError(t, err)
		got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		h := got.Messages[0].ReceiptHandle
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: h, VisibilityTimeout: 0})
		require.NoError(t, err)
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: h, VisibilityTimeout: 30})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.MessageNotInflight")
		requireStatus(t, err, 400)
		batch, err := c.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: q.QueueUrl,
			Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("a"), ReceiptHandle: h, VisibilityTimeout: 30}}})
		require.NoError(t, err)
		require.Len(t, batch.Failed, 1)
		require.Equal(t, "AWS.SimpleQueueService.MessageNotInflight", aws.ToString(batch.Failed[0].Code))
	})
}

// TestSQSMaximumMessageSize: the default and the maximum are 1,048,576
// bytes; a send over the queue's limit names it.
func TestSQSMaximumMessageSize(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("big")})
		require.NoError(t, err)
		a, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
			AttributeNames: []types.QueueAttributeName{"MaximumMessageSize"}})
		require.NoError(t, err)
		require.Equal(t, "1048576", a.Attributes["MaximumMessageSize"])
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(strings.Repeat("x", 1048576))})
		require.NoError(t, err, "a 1 MiB message fits the default")
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(strings.Repeat("x", 1048577))})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "Message must be shorter than 1048576 bytes.")

		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q.QueueUrl,
			Attributes: map[string]string{"MaximumMessageSize": "1048577"}})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue")
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q.QueueUrl,
			Attributes: map[string]string{"MaximumMessageSize": "1024"}})
		require.NoError(t, err)
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(strings.Repeat("x", 1025))})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "Message must be shorter than 1024 bytes.")
	})
}

// TestSQSMessageAttributeNamePrefix: "<prefix>.*" selects the message
// attributes whose names start with <prefix>; "All" and ".*" select all.
func TestSQSMessageAttributeNamePrefix(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("attrs")})
		require.NoError(t, err)
		str := func(v string) types.MessageAttributeValue {
			return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
		for _, tc := range []struct {
			names []string
			want  string
		}{
			{[]string{"Custom.*"}, "Custom1,Custom2"},
			{[]string{".*"}, "Custom1,Custom2,Other,X.Y"},
			{[]string{"All"}, "Custom1,Custom2,Other,X.Y"},
			{[]string{"X.*"}, "X.Y"},
			{[]string{"Custom2", "Other"}, "Custom2,Other"},
			{[]string{"Custom.*", "Other", "X.*"}, "Custom1,Custom2,Other,X.Y"},
		} {
			_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("m"),
				MessageAttributes: map[string]types.MessageAttributeValue{"Custom1": str("1"), "Custom2": str("2"), "Other": str("3"), "X.Y": str("4")}})
			require.NoError(t, err)
			got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5, MessageAttributeNames: tc.names})
			require.NoError(t, err) // the SDK checks MD5OfMessageAttributes over what came
			require.Len(t, got.Messages, 1)
			require.Equal(t, tc.want, strings.Join(slices.Sorted(maps.Keys(got.Messages[0].MessageAttributes)), ","), "%v", tc.names)
			_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: got.Messages[0].ReceiptHandle})
			require.NoError(t, err)
		}
	})
}

// TestSQSErrorsAsAWS: error codes and messages as AWS answers them (some
// clients match the messages).
func TestSQSErrorsAsAWS(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("errs")})
		require.NoError(t, err)

		// A QueueUrl without a queue path.
		for _, u := range []string{s.Endpoint, s.Endpoint + "/", s.Endpoint + "/000000000000/"} {
			_, err = c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(u),
				AttributeNames: []types.QueueAttributeName{"All"}})
			servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")
			requireStatus(t, err, 400)
		}

		// Queue names.
		for _, name := range []string{"", "bad name", strings.Repeat("n", 81)} {
			_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name)})
			servertest.RequireSQSError(t, err, "InvalidParameterValue")
			requireMessage(t, err, "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
		}

		// Tags.
		_, err = c.UntagQueue(ctx, &awssqs.UntagQueueInput{QueueUrl: q.QueueUrl, TagKeys: []string{}})
		servertest.RequireSQSError(t, err, "InvalidParameterValue")
		requireMessage(t, err, "Tag keys must be between 1 and 128 characters in length.")
		_, err = c.UntagQueue(ctx, &awssqs.UntagQueueInput{QueueUrl: q.QueueUrl, TagKeys: []string{strings.Repeat("k", 129)}})
		requireMessage(t, err, "Tag keys must be between 1 and 128 characters in length.")
		many := map[string]string{}
		for i := range 51 {
			many["k"+strings.Repeat("x", i)] = "v"
		}
		_, err = c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: q.QueueUrl, Tags: many})
		servertest.RequireSQSError(t, err, "InvalidParameterValue")
		requireMessage(t, err, "Too many tags added for queue errs.")

		// Receipt handles and batches.
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: aws.String("bm90IGEgaGFuZGxl")})
		servertest.RequireSQSError(t, err, "ReceiptHandleIsInvalid")
		requireMessage(t, err, "The input receipt handle is invalid.")
		_, err = c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []types.SendMessageBatchRequestEntry{}})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.EmptyBatchRequest")
		requireMessage(t, err, "There should be at least one SendMessageBatchRequestEntry in the request.")
		_, err = c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []types.DeleteMessageBatchRequestEntry{}})
		requireMessage(t, err, "There should be at least one DeleteMessageBatchRequestEntry in the request.")
		_, err = c.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: q.QueueUrl,
			Entries: []types.ChangeMessageVisibilityBatchRequestEntry{}})
		requireMessage(t, err, "There should be at least one ChangeMessageVisibilityBatchRequestEntry in the request.")
	})
}

// requireStatus asserts err is an answer of HTTP status code.
func requireStatus(t *testing.T, err error, code int) {
	t.Helper()
	var re *awshttp.ResponseError
	require.True(t, errors.As(err, &re), "not an HTTP response error: %v", err)
	require.Equal(t, code, re.HTTPStatusCode(), err.Error())
}

// requireMessage asserts err's message is exactly msg.
func requireMessage(t *testing.T, err error, msg string) {
	t.Helper()
	require.Error(t, err)
	var ae interface{ ErrorMessage() string }
	require.True(t, errors.As(err, &ae), "not an API error: %v", err)
	require.Equal(t, msg, ae.ErrorMessage())
}
