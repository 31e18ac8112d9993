package sqs_test

// Issue 51 (points 1, 3, 4 and 6): the last answers that differed from
// AWS's, through the Go SDK on every backend.

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
)

// TestSQSFIFOBatchMissingIDs: a FIFO SendMessageBatch with an entry without
// MessageGroupId, or without MessageDeduplicationId on a queue without
// ContentBasedDeduplication, fails as a whole and sends nothing, with the
// error AWS answers (LocalStack's AWS-validated snapshots of
// test_send_batch_missing_message_group_id_for_fifo_queue and
// test_send_batch_missing_deduplication_id_for_fifo_queue).
func TestSQSFIFOBatchMissingIDs(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("batch.fifo"), Attributes: fifoAttrs()})
		require.NoError(t, err)
		valid := types.SendMessageBatchRequestEntry{Id: aws.String("ok"), MessageBody: aws.String("kept?"),
			MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d-ok")}

		t.Run("MissingMessageGroupId", func(t *testing.T) {
			_, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []types.SendMessageBatchRequestEntry{
				valid, {Id: aws.String("bad"), MessageBody: aws.String("b"), MessageDeduplicationId: aws.String("d-bad")}}})
			servertest.RequireSQSError(t, err, "InvalidParameterValue")
			requireMessage(t, err, "The request must contain the parameter MessageGroupId.")
			requireStatus(t, err, 400)
		})
		t.Run("MissingMessageDeduplicationId", func(t *testing.T) {
			_, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []types.SendMessageBatchRequestEntry{
				valid, {Id: aws.String("bad"), MessageBody: aws.String("b"), MessageGroupId: aws.String("g")}}})
			servertest.RequireSQSError(t, err, "InvalidParameterValue")
			requireMessage(t, err, "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
			requireStatus(t, err, 400)
		})
		require.Empty(t, s.Items("batch.fifo"), "a batch that fails sends nothing")

		// The valid entry alone is sent, under its deduplication id: the
		// failed calls claimed nothing.
		out, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []types.SendMessageBatchRequestEntry{valid}})
		require.NoError(t, err)
		require.Len(t, out.Successful, 1)
		require.Empty(t, out.Failed)
		require.Len(t, s.WaitItems("batch.fifo", 1), 1)
	})
}

// TestSQSFIFODeadLetterDeduplicationID: a message moved into a FIFO
// dead-letter queue has the original message's MessageId as its
// MessageDeduplicationId (AWS SQS Developer Guide, "Learn how to configure
// a dead-letter queue redrive in Amazon SQS": "When a message is moved
// from a FIFO queue to a FIFO DLQ, the original message's deduplication ID
// will be replaced with the original message's ID"), so two messages that
// shared a deduplication id are two messages there.
func TestSQSFIFODeadLetterDeduplicationID(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		dlq, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("dedup-dlq.fifo"), Attributes: fifoAttrs()})
		require.NoError(t, err)
		dlqArn := "arn:aws:sqs:us-east-1:000000000000:dedup-dlq.fifo"
		src, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("dedup.fifo"), Attributes: fifoAttrs(
			"DeduplicationScope", "messageGroup", "RedrivePolicy", `{"deadLetterTargetArn":"`+dlqArn+`","maxReceiveCount":1}`)})
		require.NoError(t, err)
		sent := map[string]string{} // MessageId → group
		for _, g := range []string{"a", "b"} {
			out, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: src.QueueUrl, MessageGroupId: aws.String(g),
				MessageDeduplicationId: aws.String("shared"), MessageBody: aws.String("m-" + g)})
			require.NoError(t, err)
			sent[aws.ToString(out.MessageId)] = g
		}
		all := []types.MessageSystemAttributeName{"All"}
		// Each fails once: dead-lettered.
		for range 2 {
			out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: src.QueueUrl, WaitTimeSeconds: 5, MessageSystemAttributeNames: all})
			require.NoError(t, err)
			require.Len(t, out.Messages, 1)
			require.Equal(t, "shared", out.Messages[0].Attributes["MessageDeduplicationId"], "in its queue, the id it was sent with")
			_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: src.QueueUrl,
				ReceiptHandle: out.Messages[0].ReceiptHandle, VisibilityTimeout: 0})
			require.NoError(t, err)
		}
		s.WaitItems("dedup-dlq.fifo", 2)
		got := map[string]string{}
		for len(got) < 2 {
			out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: dlq.QueueUrl, WaitTimeSeconds: 5, MaxNumberOfMessages: 10,
				MessageSystemAttributeNames: all})
			require.NoError(t, err)
			require.NotEmpty(t, out.Messages)
			for _, m := range out.Messages {
				id := aws.ToString(m.MessageId)
				require.Contains(t, sent, id)
				require.Equal(t, id, m.Attributes["MessageDeduplicationId"], "in the dead-letter queue, the original message's id")
				require.Equal(t, sent[id], m.Attributes["MessageGroupId"])
				got[id] = m.Attributes["MessageDeduplicationId"]
			}
		}
	})
}

// TestSQSErrorWording: errors worded as AWS and moto word them.
func TestSQSErrorWording(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("words")})
		require.NoError(t, err)

		t.Run("InvalidReceiptHandle", func(t *testing.T) {
			// A single call: the short form; a DeleteMessageBatch entry:
			// the handle quoted (moto's test_delete_message_batch_with_invalid_receipt_id).
			_, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: aws.String("fake-receipt-handle-1")})
			servertest.RequireSQSError(t, err, "ReceiptHandleIsInvalid")
			requireMessage(t, err, "The input receipt handle is invalid.")
			_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl,
				ReceiptHandle: aws.String("fake-receipt-handle-1"), VisibilityTimeout: 1})
			servertest.RequireSQSError(t, err, "ReceiptHandleIsInvalid")
			requireMessage(t, err, "The input receipt handle is invalid.")
			del, err := c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []types.DeleteMessageBatchRequestEntry{
				{Id: aws.String("e1"), ReceiptHandle: aws.String("fake-receipt-handle-1")}}})
			require.NoError(t, err)
			require.Empty(t, del.Successful)
			require.Equal(t, []types.BatchResultErrorEntry{{Id: aws.String("e1"), SenderFault: true, Code: aws.String("ReceiptHandleIsInvalid"),
				Message: aws.String(`The input receipt handle "fake-receipt-handle-1" is not a valid receipt handle.`)}}, del.Failed)
			vis, err := c.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: q.QueueUrl,
				Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("e1"), ReceiptHandle: aws.String("fake-receipt-handle-1"), VisibilityTimeout: 1}}})
			require.NoError(t, err)
			require.Equal(t, []types.BatchResultErrorEntry{{Id: aws.String("e1"), SenderFault: true, Code: aws.String("ReceiptHandleIsInvalid"),
				Message: aws.String("The input receipt handle is invalid.")}}, vis.Failed)
		})

		t.Run("InvalidBatchEntryId", func(t *testing.T) {
			const msg = "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long."
			for _, id := range []string{"", "invalid:id", strings.Repeat("testLongId", 10)} {
				_, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl,
					Entries: []types.SendMessageBatchRequestEntry{{Id: aws.String(id), MessageBody: aws.String("x")}}})
				servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.InvalidBatchEntryId")
				requireMessage(t, err, msg)
				_, err = c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl,
					Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String(id), ReceiptHandle: aws.String("x")}}})
				servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.InvalidBatchEntryId")
				requireMessage(t, err, msg)
				_, err = c.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: q.QueueUrl,
					Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String(id), ReceiptHandle: aws.String("x"), VisibilityTimeout: 1}}})
				servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.InvalidBatchEntryId")
				requireMessage(t, err, msg)
			}
		})

		t.Run("InvalidMessageAttributeDataType", func(t *testing.T) {
			for _, dt := range []string{"InvalidNumber", "Foo.String"} {
				_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("derp"),
					MessageAttributes: map[string]types.MessageAttributeValue{"timestamp": {DataType: aws.String(dt), StringValue: aws.String("1")}}})
				servertest.RequireSQSError(t, err, "InvalidParameterValue")
				requireMessage(t, err, "The message attribute 'timestamp' has an invalid message attribute type, the set of supported type prefixes is Binary, Number, and String.")
			}
		})

		t.Run("InvalidMessageAttributeName", func(t *testing.T) {
			_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("derp"),
				MessageAttributes: map[string]types.MessageAttributeValue{"öther_encodings": {DataType: aws.String("String"), StringValue: aws.String("str")}}})
			servertest.RequireSQSError(t, err, "InvalidParameterValue")
			requireMessage(t, err, "The message attribute name 'öther_encodings' is invalid. Attribute name can contain A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.) characters.")
		})

		t.Run("UnknownQueueAttributeName", func(t *testing.T) {
			for _, names := range [][]types.QueueAttributeName{{"QueueArn", "not-existing", "VisibilityTimeout"}, {""}, {"All", "not-existing"}} {
				_, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: names})
				want := "not-existing"
				if names[0] == "" {
					want = ""
				}
				servertest.RequireSQSError(t, err, "InvalidAttributeName")
				requireMessage(t, err, "Unknown Attribute "+want+".")
			}
			_, err := c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q.QueueUrl, Attributes: map[string]string{"not-existing": "1"}})
			servertest.RequireSQSError(t, err, "InvalidAttributeName")
			requireMessage(t, err, "Unknown Attribute not-existing.")
			_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("words2"), Attributes: map[string]string{"not-existing": "1"}})
			servertest.RequireSQSError(t, err, "InvalidAttributeName")
			requireMessage(t, err, "Unknown Attribute not-existing.")
		})
	})
}

// TestSQSUnsignedQueryRefused: without --auth, an SQS call in the JSON
// protocol is served signed or not, and one in the query protocol only
// signed (any signature): an unsigned GET or form POST is what any web
// page can send (docs/security.md), so it is refused 403 AccessDenied.
func TestSQSUnsignedQueryRefused(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		do := func(req *http.Request, signed bool) (int, string) {
			t.Helper()
			if signed {
				req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20261127/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature=0")
			}
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			raw, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			return res.StatusCode, string(raw)
		}
		form := url.Values{"Action": {"ListQueues"}, "Version": {"2012-11-05"}}
		post := func() *http.Request {
			req, err := http.NewRequest(http.MethodPost, s.Endpoint+"/", strings.NewReader(form.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return req
		}
		get := func() *http.Request {
			req, err := http.NewRequest(http.MethodGet, s.Endpoint+"/?"+form.Encode(), nil)
			require.NoError(t, err)
			return req
		}
		json := func() *http.Request {
			req, err := http.NewRequest(http.MethodPost, s.Endpoint+"/", strings.NewReader("{}"))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-amz-json-1.0")
			req.Header.Set("X-Amz-Target", "AmazonSQS.ListQueues")
			return req
		}
		for name, req := range map[string]func() *http.Request{"FormPOST": post, "GET": get} {
			code, body := do(req(), false)
			require.Equal(t, http.StatusForbidden, code, name+": "+body)
			require.Contains(t, body, "<Code>AccessDenied</Code>", name)
			require.Contains(t, body, "an unsigned SQS query-protocol call", name)
			code, body = do(req(), true)
			require.Equal(t, http.StatusOK, code, name+" signed: "+body)
		}
		code, body := do(json(), false)
		require.Equal(t, http.StatusOK, code, "JSON unsigned: "+body)
	})
}
