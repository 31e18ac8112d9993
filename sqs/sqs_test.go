package sqs_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

func TestSQSQueues(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")

		created, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders"), Attributes: map[string]string{
			"VisibilityTimeout": "45", "DelaySeconds": "2", "MessageRetentionPeriod": "3600",
			"ReceiveMessageWaitTimeSeconds": "5", "MaximumMessageSize": "2048",
		}})
		require.NoError(t, err)
		url := s.Endpoint + "/000000000000/orders"
		require.Equal(t, url, aws.ToString(created.QueueUrl))

		got, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("orders")})
		require.NoError(t, err)
		require.Equal(t, url, aws.ToString(got.QueueUrl))

		attrs, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: created.QueueUrl, AttributeNames: []types.QueueAttributeName{"All"}})
		require.NoError(t, err)
		a := attrs.Attributes
		require.Equal(t, "45", a["VisibilityTimeout"])
		require.Equal(t, "2", a["DelaySeconds"])
		require.Equal(t, "3600", a["MessageRetentionPeriod"])
		require.Equal(t, "5", a["ReceiveMessageWaitTimeSeconds"])
		require.Equal(t, "2048", a["MaximumMessageSize"])
		require.Equal(t, "arn:aws:sqs:us-east-1:000000000000:orders", a["QueueArn"])
		require.Equal(t, "0", a["ApproximateNumberOfMessages"])
		require.NotEmpty(t, a["CreatedTimestamp"])

		// The same queue is visible to /v1: the lease timeout is the
		// visibility timeout, the expire timeout the retention period.
		info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "orders"})
		require.NoError(t, err)
		require.Equal(t, "45s", info.LeaseTimeout)
		require.Equal(t, "1h0m0s", info.ExpireTimeout)

		// CreateQueue of an existing queue: its URL when the attributes
		// match, QueueAlreadyExists when they differ.
		again, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders"), Attributes: map[string]string{"VisibilityTimeout": "45"}})
		require.NoError(t, err)
		require.Equal(t, url, aws.ToString(again.QueueUrl))
		_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders"), Attributes: map[string]string{"VisibilityTimeout": "46"}})
		servertest.RequireSQSError(t, err, "QueueAlreadyExists", "VisibilityTimeout")
		var exists *types.QueueNameExists
		require.ErrorAs(t, err, &exists)

		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: created.QueueUrl, Attributes: map[string]string{"VisibilityTimeout": "60", "DelaySeconds": "0"}})
		require.NoError(t, err)
		attrs, err = c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: created.QueueUrl, AttributeNames: []types.QueueAttributeName{"VisibilityTimeout", "DelaySeconds"}})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"VisibilityTimeout": "60", "DelaySeconds": "0"}, attrs.Attributes)

		// Bad input: 400 with the SQS error, never a 500.
		_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("jobs.fifo")})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "Can only include alphanumeric characters")
		_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("bad name")})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "alphanumeric")
		_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("q"), Attributes: map[string]string{"Colour": "blue"}})
		servertest.RequireSQSError(t, err, "InvalidAttributeName", "Colour")
		_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("q"), Attributes: map[string]string{"DelaySeconds": "901"}})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "DelaySeconds", "0 to 900")
		_, err = c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("nope")})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.NonExistentQueue")
		var missing *types.QueueDoesNotExist
		require.ErrorAs(t, err, &missing)
		_, err = c.AddPermission(ctx, &awssqs.AddPermissionInput{QueueUrl: created.QueueUrl, Label: aws.String("l"),
			AWSAccountIds: []string{"1"}, Actions: []string{"SendMessage"}})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.UnsupportedOperation", "not supported")

		// ListQueues: prefix and pagination.
		for i := range 5 {
			_, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(fmt.Sprintf("page-%d", i))})
			require.NoError(t, err)
		}
		all, err := c.ListQueues(ctx, &awssqs.ListQueuesInput{})
		require.NoError(t, err)
		require.Len(t, all.QueueUrls, 6)
		require.Nil(t, all.NextToken)
		var pages [][]string
		var token *string
		for {
			page, err := c.ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String("page-"), MaxResults: aws.Int32(2), NextToken: token})
			require.NoError(t, err)
			pages = append(pages, page.QueueUrls)
			if token = page.NextToken; token == nil {
				break
			}
		}
		require.Equal(t, [][]string{
			{s.Endpoint + "/000000000000/page-0", s.Endpoint + "/000000000000/page-1"},
			{s.Endpoint + "/000000000000/page-2", s.Endpoint + "/000000000000/page-3"},
			{s.Endpoint + "/000000000000/page-4"},
		}, pages)

		_, err = c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: created.QueueUrl})
		require.NoError(t, err)
		_, err = c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: created.QueueUrl})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.NonExistentQueue")
	})
}

func TestSQSMessages(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("work")})
		require.NoError(t, err)

		sent, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("héllo"),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"ordinal":  {DataType: aws.String("Number"), StringValue: aws.String("1")},
				"category": {DataType: aws.String("String"), StringValue: aws.String("test")},
				"blob":     {DataType: aws.String("Binary.gzip"), BinaryValue: []byte{0, 1, 2}},
			},
			MessageSystemAttributes: map[string]types.MessageSystemAttributeValue{
				"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-abc")},
			}})
		require.NoError(t, err) // the SDK checked MD5OfMessageBody
		require.NotEmpty(t, aws.ToString(sent.MessageId))
		require.NotEmpty(t, aws.ToString(sent.MD5OfMessageAttributes))
		require.NotEmpty(t, aws.ToString(sent.MD5OfMessageSystemAttributes))

		got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10,
			MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
		require.NoError(t, err) // the SDK checked MD5OfBody
		require.Len(t, got.Messages, 1)
		m := got.Messages[0]
		require.Equal(t, "héllo", aws.ToString(m.Body))
		require.Equal(t, aws.ToString(sent.MessageId), aws.ToString(m.MessageId))
		require.Equal(t, aws.ToString(sent.MD5OfMessageAttributes), aws.ToString(m.MD5OfMessageAttributes))
		require.Len(t, m.MessageAttributes, 3)
		require.Equal(t, []byte{0, 1, 2}, m.MessageAttributes["blob"].BinaryValue)
		require.Equal(t, "Binary.gzip", aws.ToString(m.MessageAttributes["blob"].DataType))
		require.Equal(t, "1", m.Attributes["ApproximateReceiveCount"])
		require.Equal(t, "Root=1-abc", m.Attributes["AWSTraceHeader"])
		sentAt, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64)
		require.NoError(t, err)
		require.InDelta(t, time.Now().UnixMilli(), sentAt, float64(time.Minute.Milliseconds()))
		require.NotEmpty(t, m.Attributes["ApproximateFirstReceiveTimestamp"])

		// A subset of the attributes, by name: the digest covers what is
		// returned.
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		require.NoError(t, err)
		got, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MessageAttributeNames: []string{"category", "ordinal"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{"ApproximateReceiveCount"}, WaitTimeSeconds: 5})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		m2 := got.Messages[0]
		require.Equal(t, aws.ToString(sent.MessageId), aws.ToString(m2.MessageId), "the MessageId stays across receives")
		require.NotEqual(t, aws.ToString(m.ReceiptHandle), aws.ToString(m2.ReceiptHandle), "a receipt handle names one receive")
		require.Equal(t, map[string]string{"ApproximateReceiveCount": "2"}, m2.Attributes)
		require.Len(t, m2.MessageAttributes, 2)
		require.Equal(t, "d21ae90c49061e927f57df5f5d72be1f", aws.ToString(m2.MD5OfMessageAttributes))

		// A stale handle: visibility change refused (its receive is not in
		// flight), delete "succeeds" and deletes nothing (SQS's documented
		// behaviour); the newest handle deletes.
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 10})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.MessageNotInflight")
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle})
		require.NoError(t, err)
		require.Len(t, s.Items("work"), 1, "a stale handle deletes nothing")
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: m2.ReceiptHandle, VisibilityTimeout: 600})
		require.NoError(t, err)
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m2.ReceiptHandle})
		require.NoError(t, err)
		require.Empty(t, s.Items("work"))
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: aws.String("bm90IGEgaGFuZGxl")})
		servertest.RequireSQSError(t, err, "ReceiptHandleIsInvalid")

		// Batches: partial failures, then receive 10 and delete them.
		var entries []types.SendMessageBatchRequestEntry
		for i := range 10 {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint("e", i)), MessageBody: aws.String(fmt.Sprint("m", i))})
		}
		entries[3].MessageBody = aws.String("")
		entries[7].DelaySeconds = 901
		batch, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: entries})
		require.NoError(t, err)
		require.Len(t, batch.Successful, 8)
		require.Len(t, batch.Failed, 2)
		require.Equal(t, "e3", aws.ToString(batch.Failed[0].Id))
		require.Equal(t, "InvalidParameterValue", aws.ToString(batch.Failed[0].Code))
		require.True(t, batch.Failed[0].SenderFault)
		require.Equal(t, "e7", aws.ToString(batch.Failed[1].Id))
		_, err = c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: append(entries, entries[0])})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.TooManyEntriesInBatchRequest")
		_, err = c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []types.SendMessageBatchRequestEntry{entries[0], entries[0]}})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct")
		_, err = c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []types.SendMessageBatchRequestEntry{}})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.EmptyBatchRequest")

		var bodies []string
		var handles []types.DeleteMessageBatchRequestEntry
		for len(bodies) < 8 {
			got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 5})
			require.NoError(t, err)
			for _, m := range got.Messages {
				bodies = append(bodies, aws.ToString(m.Body))
				handles = append(handles, types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint("d", len(handles))), ReceiptHandle: m.ReceiptHandle})
			}
		}
		slices.Sort(bodies)
		require.Equal(t, []string{"m0", "m1", "m2", "m4", "m5", "m6", "m8", "m9"}, bodies)
		handles = append(handles, types.DeleteMessageBatchRequestEntry{Id: aws.String("bad"), ReceiptHandle: aws.String("eA")})
		del, err := c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl, Entries: handles})
		require.NoError(t, err)
		require.Len(t, del.Successful, 8)
		require.Len(t, del.Failed, 1)
		require.Equal(t, "ReceiptHandleIsInvalid", aws.ToString(del.Failed[0].Code))
		require.Empty(t, s.Items("work"))

		// Visibility batch and per-call VisibilityTimeout.
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("v")})
		require.NoError(t, err)
		got, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, VisibilityTimeout: 600, WaitTimeSeconds: 5})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		leased := s.Items("work")[0]
		require.WithinDuration(t, time.Now().Add(600*time.Second), leased.LeaseDeadline.AsTime(), time.Minute)
		vis, err := c.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: q.QueueUrl,
			Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
				{Id: aws.String("a"), ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 1200},
				{Id: aws.String("b"), ReceiptHandle: aws.String("eA"), VisibilityTimeout: 5},
			}})
		require.NoError(t, err)
		require.Len(t, vis.Successful, 1)
		require.Len(t, vis.Failed, 1)
		require.WithinDuration(t, time.Now().Add(1200*time.Second), s.Items("work")[0].LeaseDeadline.AsTime(), time.Minute)

		// A delayed message is not visible until its delay passes (a
		// scheduled item); the queue's DelaySeconds is the default.
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("later"), DelaySeconds: 600})
		require.NoError(t, err)
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q.QueueUrl, Attributes: map[string]string{"DelaySeconds": "900"}})
		require.NoError(t, err)
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("default delay")})
		require.NoError(t, err)
		counts, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []types.QueueAttributeName{"All"}})
		require.NoError(t, err)
		require.Equal(t, "2", counts.Attributes["ApproximateNumberOfMessagesDelayed"])
		require.Equal(t, "1", counts.Attributes["ApproximateNumberOfMessagesNotVisible"])
		require.Equal(t, "0", counts.Attributes["ApproximateNumberOfMessages"])
		for _, it := range s.Items("work") {
			if string(it.Payload) != "v" {
				require.True(t, it.EnqueueAt.AsTime().After(time.Now().Add(590*time.Second)), "scheduled by the delay")
			}
		}

		_, err = c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: q.QueueUrl})
		require.NoError(t, err)
		require.Empty(t, s.Items("work"), "purge deletes in-flight messages too")

		// Bad input.
		_, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 11})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "MaxNumberOfMessages")
		_, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 21})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "WaitTimeSeconds")
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"n": {DataType: aws.String("Number"), StringValue: aws.String("abc")}}})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "number")
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("bell \x07")})
		servertest.RequireSQSError(t, err, "InvalidMessageContents")
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(s.Endpoint + "/000000000000/nope"), MessageBody: aws.String("x")})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.NonExistentQueue")
	})
}

// TestSQSLongPollWokenBySend: a ReceiveMessage waiting on an empty queue is
// answered by the next send, long before its WaitTimeSeconds.
func TestSQSLongPollWokenBySend(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("poll"), Attributes: map[string]string{"ReceiveMessageWaitTimeSeconds": "20"}})
		require.NoError(t, err)
		var wg sync.WaitGroup
		var got *awssqs.ReceiveMessageOutput
		var recvErr error
		begin := time.Now()
		wg.Go(func() {
			// WaitTimeSeconds omitted: the queue's default (20 s) applies.
			got, recvErr = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl})
		})
		servertest.Eventually(t, func() bool {
			st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "poll"})
			return err == nil && st.LogicalQueues[0].LeaseWaiting == 1
		}, "the receive should be waiting")
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("wake")})
		require.NoError(t, err)
		wg.Wait()
		require.NoError(t, recvErr)
		require.Len(t, got.Messages, 1)
		require.Equal(t, "wake", aws.ToString(got.Messages[0].Body))
		require.Less(t, time.Since(begin), 15*time.Second)

		// A short poll of an empty queue answers at once with nothing (the
		// SDK omits a WaitTimeSeconds of 0, so the queue's default is 0).
		short, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("short")})
		require.NoError(t, err)
		begin = time.Now()
		empty, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: short.QueueUrl})
		require.NoError(t, err)
		require.Empty(t, empty.Messages)
		require.Less(t, time.Since(begin), 5*time.Second)
	})
}

// TestSQSWireErrors checks the error shape on the wire: __type, message,
// status and x-amzn-query-error; and that malformed bodies are 400s.
func TestSQSWireErrors(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		call := func(target, body string) (int, http.Header, map[string]string) {
			req, err := http.NewRequest(http.MethodPost, s.Endpoint+"/", bytes.NewBufferString(body))
			require.NoError(t, err)
			req.Host = "127.0.0.1"
			req.Header.Set("Content-Type", "application/x-amz-json-1.0")
			req.Header.Set("X-Amz-Target", target)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			raw, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			var out map[string]string
			_ = json.Unmarshal(raw, &out)
			return res.StatusCode, res.Header, out
		}
		code, h, out := call("AmazonSQS.GetQueueUrl", `{"QueueName":"nope"}`)
		require.Equal(t, 400, code)
		require.Equal(t, "com.amazonaws.sqs#QueueDoesNotExist", out["__type"])
		require.Equal(t, "The specified queue does not exist.", out["message"])
		require.Equal(t, "AWS.SimpleQueueService.NonExistentQueue;Sender", h.Get("x-amzn-query-error"))
		for _, bad := range []struct{ target, body, typ string }{
			{"AmazonSQS.CreateQueue", `{"QueueName":`, "SerializationException"},
			{"AmazonSQS.CreateQueue", `{"QueueName":7}`, "SerializationException"},
			{"AmazonSQS.CreateQueue", `{}`, "InvalidParameterValue"},
			{"AmazonSQS.SendMessage", `{"QueueUrl":"%%"}`, "InvalidAddress"},
			{"AmazonSQS.Frobnicate", `{}`, "InvalidAction"},
			{"AmazonSQS.ReceiveMessage", `{"QueueUrl":"x","MaxNumberOfMessages":"many"}`, "SerializationException"},
		} {
			code, _, out := call(bad.target, bad.body)
			require.Less(t, code, 500, "%s %s", bad.target, bad.body)
			require.GreaterOrEqual(t, code, 400)
			require.Equal(t, "com.amazonaws.sqs#"+bad.typ, out["__type"], "%s %s", bad.target, bad.body)
		}
	})
}

// TestSQSDeadLetterFlow: RedrivePolicy is the queue's dead_queue and
// max_attempts; a message received maxReceiveCount times (once by an
// expired visibility timeout, once made visible with 0) goes to the
// dead-letter queue, and a message move task brings it back with the same
// MessageId, body, attributes and SentTimestamp.
func TestSQSDeadLetterFlow(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		dlq, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-dlq")})
		require.NoError(t, err)
		dlqArn := "arn:aws:sqs:us-east-1:000000000000:orders-dlq"
		policy := `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":"2"}`
		src, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders"), Attributes: map[string]string{"RedrivePolicy": policy}})
		require.NoError(t, err)
		info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "orders"})
		require.NoError(t, err)
		require.Equal(t, "orders-dlq", info.DeadQueue)
		require.Equal(t, int32(2), info.MaxAttempts)
		attrs, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: src.QueueUrl, AttributeNames: []types.QueueAttributeName{"RedrivePolicy"}})
		require.NoError(t, err)
		require.JSONEq(t, `{"deadLetterTargetArn":"`+dlqArn+`","maxReceiveCount":2}`, attrs.Attributes["RedrivePolicy"])

		sources, err := c.ListDeadLetterSourceQueues(ctx, &awssqs.ListDeadLetterSourceQueuesInput{QueueUrl: dlq.QueueUrl})
		require.NoError(t, err)
		require.Equal(t, []string{aws.ToString(src.QueueUrl)}, sources.QueueUrls)

		sent, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: src.QueueUrl, MessageBody: aws.String("order 1"),
			MessageAttributes: map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")}}})
		require.NoError(t, err)
		all := []types.MessageSystemAttributeName{"All"}
		// Receive 1: the visibility timeout (1 s) passes; the message comes
		// back.
		got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: src.QueueUrl, VisibilityTimeout: 1, MessageSystemAttributeNames: all})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		first := got.Messages[0]
		got, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: src.QueueUrl, WaitTimeSeconds: 10, MessageSystemAttributeNames: all})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		second := got.Messages[0]
		require.Equal(t, aws.ToString(sent.MessageId), aws.ToString(second.MessageId))
		require.Equal(t, "2", second.Attributes["ApproximateReceiveCount"])
		// The first receive's handle is stale: deleting with it deletes
		// nothing.
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: src.QueueUrl, ReceiptHandle: first.ReceiptHandle})
		require.NoError(t, err)
		// Receive 2 ends at once: maxReceiveCount reached, dead-lettered.
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: src.QueueUrl, ReceiptHandle: second.ReceiptHandle, VisibilityTimeout: 0})
		require.NoError(t, err)
		dead := s.WaitItems("orders-dlq", 1)[0]
		require.Equal(t, "order 1", string(dead.Payload))
		require.Equal(t, aws.ToString(sent.MessageId), dead.Reference, "the MessageId is the item's reference on /v1")
		require.Empty(t, s.Items("orders"))
		dattrs, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages"}})
		require.NoError(t, err)
		require.Equal(t, "1", dattrs.Attributes["ApproximateNumberOfMessages"])
		// Received from the dead-letter queue, it names its source; made
		// visible again, it stays for the move task.
		got, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: dlq.QueueUrl, WaitTimeSeconds: 5, MessageSystemAttributeNames: all})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		require.Equal(t, aws.ToString(sent.MessageId), aws.ToString(got.Messages[0].MessageId))
		require.Equal(t, "arn:aws:sqs:us-east-1:000000000000:orders", got.Messages[0].Attributes["DeadLetterQueueSourceArn"])
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: dlq.QueueUrl, ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 0})
		require.NoError(t, err)

		// A move task back to the source: a Styx redrive task.
		task, err := c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String(dlqArn), MaxNumberOfMessagesPerSecond: aws.Int32(100)})
		require.NoError(t, err)
		require.NotEmpty(t, aws.ToString(task.TaskHandle))
		var tasks *awssqs.ListMessageMoveTasksOutput
		servertest.Eventually(t, func() bool {
			tasks, err = c.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: aws.String(dlqArn), MaxResults: aws.Int32(10)})
			return err == nil && len(tasks.Results) == 1 && aws.ToString(tasks.Results[0].Status) == "COMPLETED"
		}, "the move task should complete")
		res := tasks.Results[0]
		require.Equal(t, int64(1), res.ApproximateNumberOfMessagesMoved)
		require.Equal(t, int64(1), aws.ToInt64(res.ApproximateNumberOfMessagesToMove))
		require.Equal(t, dlqArn, aws.ToString(res.SourceArn))
		require.Equal(t, int32(100), aws.ToInt32(res.MaxNumberOfMessagesPerSecond))
		redrives, err := s.C.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: "orders-dlq"})
		require.NoError(t, err)
		require.Len(t, redrives.Tasks, 1, "the move task is a redrive task")

		got, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: src.QueueUrl, WaitTimeSeconds: 10,
			MessageSystemAttributeNames: all, MessageAttributeNames: []string{"All"}})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		back := got.Messages[0]
		require.Equal(t, aws.ToString(sent.MessageId), aws.ToString(back.MessageId), "the MessageId survives dead-lettering and redrive")
		require.Equal(t, "order 1", aws.ToString(back.Body))
		require.Equal(t, first.Attributes["SentTimestamp"], back.Attributes["SentTimestamp"])
		require.Equal(t, "acme", aws.ToString(back.MessageAttributes["tenant"].StringValue))
		require.Equal(t, aws.ToString(sent.MD5OfMessageAttributes), aws.ToString(back.MD5OfMessageAttributes))

		// Cancel: a finished task cannot be cancelled; a bad handle is
		// refused.
		_, err = c.CancelMessageMoveTask(ctx, &awssqs.CancelMessageMoveTaskInput{TaskHandle: task.TaskHandle})
		servertest.RequireSQSError(t, err, "ResourceNotFoundException")
		_, err = c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String("arn:aws:sqs:us-east-1:000000000000:orders")})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "Dead Letter Queue")

		// RedriveAllowPolicy: a dead-letter queue that denies all sources
		// cannot be named in a RedrivePolicy; byQueue allows the listed
		// ones.
		_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("closed-dlq"), Attributes: map[string]string{
			"RedriveAllowPolicy": `{"redrivePermission":"denyAll"}`}})
		require.NoError(t, err)
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: src.QueueUrl, Attributes: map[string]string{
			"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:closed-dlq","maxReceiveCount":3}`}})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "RedriveAllowPolicy")
		_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("picky-dlq"), Attributes: map[string]string{
			"RedriveAllowPolicy": `{"redrivePermission":"byQueue","sourceQueueArns":["arn:aws:sqs:us-east-1:000000000000:orders"]}`}})
		require.NoError(t, err)
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: src.QueueUrl, Attributes: map[string]string{
			"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:picky-dlq","maxReceiveCount":3}`}})
		require.NoError(t, err)
		_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("other"), Attributes: map[string]string{
			"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:picky-dlq","maxReceiveCount":3}`}})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "RedriveAllowPolicy")
		// And on the dead-letter queue's side: it cannot shut out a queue
		// that sends to it.
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(s.Endpoint + "/000000000000/picky-dlq"),
			Attributes: map[string]string{"RedriveAllowPolicy": `{"redrivePermission":"denyAll"}`}})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "orders names this queue")
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: src.QueueUrl, Attributes: map[string]string{"RedrivePolicy": ""}})
		require.NoError(t, err)
		info, err = s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "orders"})
		require.NoError(t, err)
		require.Empty(t, info.DeadQueue)
	})
}

// TestSQSSharesV1Rules: the SQS API and /v1 check a request against the
// same rules, written once (issue 36): max_attempts and maxReceiveCount
// (queue.CheckMaxAttempts), the dead-letter rules of the queue layer, and
// a redrive's (redrive.Runner.Start); SQS answers them in its own words.
func TestSQSSharesV1Rules(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		arn := func(name string) *string { return aws.String("arn:aws:sqs:us-east-1:000000000000:" + name) }
		policy := func(target string, n any) map[string]string {
			return map[string]string{"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%v}`, *arn(target), n)}
		}
		_, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("rules-dlq")})
		require.NoError(t, err)

		// maxReceiveCount: 1 to /v1's largest max_attempts (AWS stops at 1,000).
		src, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("rules"), Attributes: policy("rules-dlq", 65536)})
		require.NoError(t, err)
		info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "rules"})
		require.NoError(t, err)
		require.Equal(t, int32(65536), info.MaxAttempts)
		for _, n := range []any{0, 65537, `"x"`} {
			_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: src.QueueUrl, Attributes: policy("rules-dlq", n)})
			servertest.RequireSQSError(t, err, "InvalidAttributeValue", "valid values are from 1 to 65536")
		}
		err = s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "v1-rules", MaxAttempts: 65537})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid max_attempts; 65537 is out of range 0..65536")

		// The target must exist: the queue layer's rule, in SQS's words.
		_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("rules-2"), Attributes: policy("ghost", 3)})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "Dead letter target does not exist")
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: src.QueueUrl, Attributes: policy("ghost", 3)})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "Dead letter target does not exist")
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: src.QueueUrl, Attributes: policy("rules", 3)})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "cannot be its own dead_queue")

		// StartMessageMoveTask: the redrive runner's checks, SQS's answers.
		start := func(source, dest string, rate int32) error {
			in := &awssqs.StartMessageMoveTaskInput{SourceArn: arn(source)}
			if dest != "" {
				in.DestinationArn = arn(dest)
			}
			if rate != 0 {
				in.MaxNumberOfMessagesPerSecond = aws.Int32(rate)
			}
			_, err := c.StartMessageMoveTask(ctx, in)
			return err
		}
		servertest.RequireSQSError(t, start("ghost", "", 0), "ResourceNotFoundException", "SourceArn")
		servertest.RequireSQSError(t, start("rules", "", 0), "InvalidParameterValue", "Source queue must be configured as a Dead Letter Queue")
		servertest.RequireSQSError(t, start("rules-dlq", "rules-dlq", 0), "InvalidParameterValue", "must not be the SourceArn")
		servertest.RequireSQSError(t, start("rules-dlq", "ghost", 0), "ResourceNotFoundException", "DestinationArn")
		servertest.RequireSQSError(t, start("rules-dlq", "", -1), "InvalidParameterValue", "must be between 1 and 1000000")
		servertest.RequireSQSError(t, start("rules-dlq", "", 1_000_001), "InvalidParameterValue", "must be between 1 and 1000000")
		_, err = s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "rules-dlq", All: true, RateLimit: 1_000_001})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid rate_limit; 1000001 is out of range 0..1000000")
		// Above AWS's 500: /v1's limit holds.
		require.NoError(t, start("rules-dlq", "", 1000))
		servertest.Eventually(t, func() bool {
			tasks, err := s.C.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: "rules-dlq"})
			return err == nil && len(tasks.Tasks) == 1 && tasks.Tasks[0].RateLimit == 1000 && tasks.Tasks[0].Status == "completed"
		}, "the move task should complete at rate 1000")
	})
}

// TestSQSAuth: with --auth, SQS requests carry a SigV4 signature made with
// a Styx key (access key id = the key's id, secret = the whole key); the
// key's scopes and queue patterns apply per action as on /v1.
func TestSQSAuth(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, admin := servertest.StartSQSAuth(t, b)
		root := s.SQSClient("bootstrap-admin", admin)
		for _, name := range []string{"orders", "billing"} {
			_, err := root.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name)})
			require.NoError(t, err)
		}
		url := func(name string) *string { return aws.String(s.Endpoint + "/000000000000/" + name) }
		workerKey := s.NewKey("worker", []string{"produce", "consume"}, "orders*")
		workerID, ok := auth.KeyID(workerKey)
		require.True(t, ok)
		worker := s.SQSClient(workerID, workerKey)

		// A good key within its scopes and queues.
		_, err := worker.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url("orders"), MessageBody: aws.String("paid")})
		require.NoError(t, err)
		got, err := worker.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url("orders"), WaitTimeSeconds: 5,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{"SenderId"}})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		require.Equal(t, "worker", got.Messages[0].Attributes["SenderId"], "SenderId is the key's name")
		_, err = worker.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url("orders"), ReceiptHandle: got.Messages[0].ReceiptHandle})
		require.NoError(t, err)

		// Out of its queues, or of its scopes: 403 AccessDenied, whether
		// the queue exists or not.
		_, err = worker.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url("billing"), MessageBody: aws.String("x")})
		servertest.RequireSQSError(t, err, "AccessDenied", "not for 'billing'")
		_, err = worker.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url("nope"), MessageBody: aws.String("x")})
		servertest.RequireSQSError(t, err, "AccessDenied", "not for 'nope'")
		_, err = worker.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-2")})
		servertest.RequireSQSError(t, err, "AccessDenied", "lacks scope 'admin'")
		_, err = worker.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: url("orders")})
		servertest.RequireSQSError(t, err, "AccessDenied", "lacks scope 'admin'")

		// ListQueues lists the queues the key covers, as queues.list, page
		// after page, however many it does not cover come first.
		for _, name := range []string{"a-1", "a-2", "a-3", "a-4", "a-5", "orders-2", "orders-3", "p-1"} {
			_, err := root.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name)})
			require.NoError(t, err)
		}
		readerKey := s.NewKey("reader", []string{"read"}, "orders*")
		readerID, _ := auth.KeyID(readerKey)
		reader := s.SQSClient(readerID, readerKey)
		var listed []string
		var token *string
		for {
			page, err := reader.ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(2), NextToken: token})
			require.NoError(t, err)
			listed = append(listed, page.QueueUrls...)
			if token = page.NextToken; token == nil {
				break
			}
		}
		require.Equal(t, []string{*url("orders"), *url("orders-2"), *url("orders-3")}, listed)
		v1, err := s.Client(readerKey).QueuesList(ctx, &pb.QueuesListRequest{Limit: 2})
		require.NoError(t, err)
		require.Len(t, v1.Items, 2)
		require.Equal(t, []string{"orders", "orders-2"}, []string{v1.Items[0].QueueName, v1.Items[1].QueueName})

		// A wrong secret, an unknown key, no signature.
		_, err = s.SQSClient(workerID, workerKey+"x").SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url("orders"), MessageBody: aws.String("x")})
		servertest.RequireSQSError(t, err, "SignatureDoesNotMatch")
		_, err = s.SQSClient("0123456789abcdef", workerKey).SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url("orders"), MessageBody: aws.String("x")})
		servertest.RequireSQSError(t, err, "InvalidClientTokenId", "unknown API key")
		anon := awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(s.Endpoint), Credentials: aws.AnonymousCredentials{}, Retryer: aws.NopRetryer{},
			HTTPClient: styxtest.AWSHTTPClient()})
		_, err = anon.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url("orders"), MessageBody: aws.String("x")})
		servertest.RequireSQSError(t, err, "MissingAuthenticationToken")

		// A deleted key stops working at once, and its waiting receive
		// ends (as a /v1 lease): nothing sent afterwards reaches it.
		var wg sync.WaitGroup
		var recvErr error
		wg.Go(func() {
			_, recvErr = worker.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url("orders"), WaitTimeSeconds: 20})
		})
		servertest.Eventually(t, func() bool {
			st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "orders"})
			return err == nil && st.LogicalQueues[0].LeaseWaiting == 1
		}, "the receive should be waiting")
		require.NoError(t, s.C.KeysDelete(ctx, &pb.KeysDeleteRequest{Name: "worker"}))
		wg.Wait()
		servertest.RequireSQSError(t, recvErr, "InvalidClientTokenId", "deleted")
		_, err = root.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url("orders"), MessageBody: aws.String("after")})
		require.NoError(t, err)
		_, err = worker.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url("orders"), MessageBody: aws.String("x")})
		servertest.RequireSQSError(t, err, "InvalidClientTokenId")
		items := s.Items("orders")
		require.Len(t, items, 1)
		require.False(t, items[0].IsLeased, "the message sent after the delete was not handed to the deleted key")
	})
}

func TestSQSTags(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("tagged"), Tags: map[string]string{"team": "payments"}})
		require.NoError(t, err)
		_, err = c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: q.QueueUrl, Tags: map[string]string{"env": "prod", "team": "billing"}})
		require.NoError(t, err)
		tags, err := c.ListQueueTags(ctx, &awssqs.ListQueueTagsInput{QueueUrl: q.QueueUrl})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"env": "prod", "team": "billing"}, tags.Tags)
		_, err = c.UntagQueue(ctx, &awssqs.UntagQueueInput{QueueUrl: q.QueueUrl, TagKeys: []string{"env"}})
		require.NoError(t, err)
		// A /v1 update keeps the SQS attributes and tags.
		require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "tagged", MaxAttempts: 5}))
		tags, err = c.ListQueueTags(ctx, &awssqs.ListQueueTagsInput{QueueUrl: q.QueueUrl})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"team": "billing"}, tags.Tags)
		many := map[string]string{}
		for i := range 51 {
			many[fmt.Sprint("k", i)] = "v"
		}
		_, err = c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: q.QueueUrl, Tags: many})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "Too many tags added for queue tagged.")
	})
}

// TestSQSQueryProtocol drives the query protocol (form-encoded requests,
// XML replies), which SDKs released before the JSON protocol send, over
// the same handlers.
func TestSQSQueryProtocol(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		call := func(path string, form url.Values) (int, string) {
			req, err := http.NewRequest(http.MethodPost, s.Endpoint+path, strings.NewReader(form.Encode()))
			require.NoError(t, err)
			req.Host = "127.0.0.1"
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
			// Without --auth any signature will do, but a query call must
			// carry one: a web page cannot (issue 36).
			req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20261127/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature=0")
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			raw, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			return res.StatusCode, string(raw)
		}
		code, body := call("/", url.Values{"Action": {"CreateQueue"}, "Version": {"2012-11-05"}, "QueueName": {"legacy"},
			"Attribute.1.Name": {"VisibilityTimeout"}, "Attribute.1.Value": {"40"}, "Tag.1.Key": {"team"}, "Tag.1.Value": {"ops"}})
		require.Equal(t, 200, code, body)
		var created struct {
			QueueURL string `xml:"CreateQueueResult>QueueUrl"`
		}
		require.NoError(t, xml.Unmarshal([]byte(body), &created))
		require.Equal(t, "http://127.0.0.1/000000000000/legacy", created.QueueURL)

		code, body = call("/", url.Values{"Action": {"SendMessage"}, "QueueUrl": {created.QueueURL}, "MessageBody": {"line 1\r\nline 2 <&>"},
			"MessageAttribute.1.Name": {"kind"}, "MessageAttribute.1.Value.DataType": {"String"}, "MessageAttribute.1.Value.StringValue": {"invoice"},
			"MessageAttribute.2.Name": {"raw"}, "MessageAttribute.2.Value.DataType": {"Binary"}, "MessageAttribute.2.Value.BinaryValue": {"AAEC"}})
		require.Equal(t, 200, code, body)
		var sent struct {
			MessageID string `xml:"SendMessageResult>MessageId"`
			MD5Attrs  string `xml:"SendMessageResult>MD5OfMessageAttributes"`
		}
		require.NoError(t, xml.Unmarshal([]byte(body), &sent))
		require.NotEmpty(t, sent.MessageID)

		// To the queue URL's path, without QueueUrl, as some SDKs send it.
		code, body = call("/000000000000/legacy", url.Values{"Action": {"ReceiveMessage"}, "AttributeName.1": {"All"},
			"MessageAttributeName.1": {"All"}, "WaitTimeSeconds": {"5"}, "MaxNumberOfMessages": {"10"}})
		require.Equal(t, 200, code, body)
		var got struct {
			Messages []struct {
				MessageID     string `xml:"MessageId"`
				ReceiptHandle string `xml:"ReceiptHandle"`
				Body          string `xml:"Body"`
				MD5OfBody     string `xml:"MD5OfBody"`
				MD5Attrs      string `xml:"MD5OfMessageAttributes"`
				Attributes    []struct {
					Name  string `xml:"Name"`
					Value string `xml:"Value"`
				} `xml:"Attribute"`
				MessageAttributes []struct {
					Name  string `xml:"Name"`
					Value struct {
						DataType    string `xml:"DataType"`
						StringValue string `xml:"StringValue"`
						BinaryValue string `xml:"BinaryValue"`
					} `xml:"Value"`
				} `xml:"MessageAttribute"`
			} `xml:"ReceiveMessageResult>Message"`
		}
		require.NoError(t, xml.Unmarshal([]byte(body), &got))
		require.Len(t, got.Messages, 1, body)
		m := got.Messages[0]
		require.Equal(t, sent.MessageID, m.MessageID)
		require.Equal(t, "line 1\r\nline 2 <&>", m.Body, "the body survives XML escaping exactly")
		require.Equal(t, sent.MD5Attrs, m.MD5Attrs)
		require.Len(t, m.MessageAttributes, 2)
		require.Equal(t, "AAEC", m.MessageAttributes[1].Value.BinaryValue)
		require.Contains(t, body, "<Name>ApproximateReceiveCount</Name><Value>1</Value>")

		code, body = call("/", url.Values{"Action": {"DeleteMessageBatch"}, "QueueUrl": {created.QueueURL},
			"DeleteMessageBatchRequestEntry.1.Id": {"a"}, "DeleteMessageBatchRequestEntry.1.ReceiptHandle": {m.ReceiptHandle},
			"DeleteMessageBatchRequestEntry.2.Id": {"b"}, "DeleteMessageBatchRequestEntry.2.ReceiptHandle": {"eA"}})
		require.Equal(t, 200, code, body)
		require.Contains(t, body, "<DeleteMessageBatchResultEntry><Id>a</Id></DeleteMessageBatchResultEntry>")
		require.Contains(t, body, "<BatchResultErrorEntry><Code>ReceiptHandleIsInvalid</Code>")
		require.Empty(t, s.Items("legacy"))

		code, body = call("/", url.Values{"Action": {"GetQueueAttributes"}, "QueueUrl": {created.QueueURL}, "AttributeName.1": {"VisibilityTimeout"}})
		require.Equal(t, 200, code, body)
		require.Contains(t, body, "<GetQueueAttributesResult><Attribute><Name>VisibilityTimeout</Name><Value>40</Value></Attribute></GetQueueAttributesResult>")
		code, body = call("/", url.Values{"Action": {"ListQueueTags"}, "QueueUrl": {created.QueueURL}})
		require.Equal(t, 200, code, body)
		require.Contains(t, body, "<Tag><Key>team</Key><Value>ops</Value></Tag>")
		code, body = call("/", url.Values{"Action": {"ListQueues"}})
		require.Equal(t, 200, code, body)
		require.Contains(t, body, "<ListQueuesResult><QueueUrl>http://127.0.0.1/000000000000/legacy</QueueUrl></ListQueuesResult>")

		// Errors as XML, with the legacy codes.
		code, body = call("/", url.Values{"Action": {"GetQueueUrl"}, "QueueName": {"nope"}})
		require.Equal(t, 400, code)
		require.Contains(t, body, "<Error><Type>Sender</Type><Code>AWS.SimpleQueueService.NonExistentQueue</Code>")
		code, body = call("/", url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {created.QueueURL}, "WaitTimeSeconds": {"soon"}})
		require.Equal(t, 400, code)
		require.Contains(t, body, "<Code>InvalidParameterValue</Code>")
		code, body = call("/", url.Values{"Action": {"Frobnicate"}})
		require.Equal(t, 400, code)
		require.Contains(t, body, "<Code>InvalidAction</Code>")
		code, body = call("/", url.Values{"Action": {"CreateQueue"}, "QueueName": {"x"}, "Attribute.x.Name": {"a"}})
		require.Equal(t, 400, code, body)
	})
}
