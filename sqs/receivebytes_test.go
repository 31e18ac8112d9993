package sqs_test

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestSQSReceiveBoundedByBytes: a ReceiveMessage answers at most ten times
// the queue's MaximumMessageSize of message bodies, and never a message
// larger than MaximumMessageSize (items produced through /v1 may be): those
// are refused, with the reason in their attempt history, and stay in the
// queue, scheduled for the queue's visibility timeout (issue 48).
func TestSQSReceiveBoundedByBytes(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		const limit = 1024
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("big"),
			Attributes: map[string]string{"MaximumMessageSize": "1024", "VisibilityTimeout": "600"}})
		require.NoError(t, err)
		// Through /v1: 3 items over the limit, then 12 that fit.
		req := &pb.QueueProduceRequest{QueueName: "big", RequestTimeout: "1m"}
		for range 3 {
			req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: bytes.Repeat([]byte("B"), 2000)})
		}
		for range 12 {
			req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: bytes.Repeat([]byte("s"), 1000)})
		}
		require.NoError(t, s.C.QueueProduce(ctx, req))

		got := 0
		for i := 0; got < 12; i++ {
			require.Less(t, i, 12, "the small messages should all come")
			out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
			require.NoError(t, err)
			total := 0
			for _, m := range out.Messages {
				body := aws.ToString(m.Body)
				require.LessOrEqual(t, len(body), limit, "a message over MaximumMessageSize was received")
				total += len(body)
			}
			require.LessOrEqual(t, total, 10*limit)
			got += len(out.Messages)
		}
		require.Equal(t, 12, got)
		// The big items are still in the queue (scheduled: refused once),
		// their attempt counted.
		st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "big"})
		require.NoError(t, err)
		scheduled, total := int32(0), int32(0)
		for _, l := range st.LogicalQueues {
			for _, p := range l.Partitions {
				scheduled += p.Scheduled
				total += p.Total
			}
		}
		require.Equal(t, int32(15), total)
		require.Equal(t, int32(3), scheduled)
	})
}

// TestSQSJSONNotHTMLEscaped: the JSON protocol writes <, > and & as they
// are, not as \u003c (six bytes each); the query protocol escapes only what
// XML requires.
func TestSQSJSONNotHTMLEscaped(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("html")})
		require.NoError(t, err)
		const text = `say "hi" <b>&amp;</b> 'x'`
		for range 2 {
			_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(text)})
			require.NoError(t, err)
		}
		raw := func(body string) string {
			req, err := http.NewRequest(http.MethodPost, s.Endpoint+"/", strings.NewReader(body))
			require.NoError(t, err)
			req.Host = "127.0.0.1"
			req.Header.Set("Content-Type", "application/x-amz-json-1.0")
			req.Header.Set("X-Amz-Target", "AmazonSQS.ReceiveMessage")
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			out, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, res.StatusCode, string(out))
			return string(out)
		}
		got := raw(`{"QueueUrl":"` + aws.ToString(q.QueueUrl) + `","WaitTimeSeconds":5}`)
		require.Contains(t, got, `"Body":"say \"hi\" <b>&amp;</b> 'x'"`)
		require.NotContains(t, got, `\u003c`)

		form := url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {aws.ToString(q.QueueUrl)}, "WaitTimeSeconds": {"5"}}
		req, err := http.NewRequest(http.MethodPost, s.Endpoint+"/", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Host = "127.0.0.1"
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20261127/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature=0")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		out, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, string(out))
		require.Contains(t, string(out), `<Body>say "hi" &lt;b&gt;&amp;amp;&lt;/b&gt; 'x'</Body>`)
	})
}
