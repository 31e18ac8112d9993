package sqs_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/styxq/styx/daemon"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// BenchmarkSQSvsNative drives send → receive → delete through the AWS
// SDK's SQS client (JSON protocol) and produce → lease → complete through
// the Go client, against one in-process server (Pebble, sync on), 1 KB
// bodies, 8 clients, at batch 1 and 10 (SQS's largest batch). One op is one
// message. The difference is the SQS layer's overhead. Run with:
//
//	go test -run '^$' -bench SQSvsNative ./sqs/
func BenchmarkSQSvsNative(b *testing.B) {
	const clients = 8
	s := styxtest.Start(b, styxtest.Options{Storage: daemon.StoragePebble})
	body := strings.Repeat("x", 1024)
	cl := s.Client
	c := awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(s.Endpoint), Retryer: aws.NopRetryer{},
		HTTPClient: styxtest.AWSHTTPClient(),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "bench", SecretAccessKey: "bench"}, nil
		})})
	for _, batch := range []int{1, 10} {
		if err := cl.QueuesCreate(ctx, &pb.QueueInfo{QueueName: fmt.Sprint("native", batch)}); err != nil {
			b.Fatal(err)
		}
	}
	for _, batch := range []int{1, 10} {
		b.Run(fmt.Sprintf("native/batch%d", batch), func(b *testing.B) {
			name := fmt.Sprint("native", batch)
			req := &pb.QueueProduceRequest{QueueName: name}
			for range batch {
				req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: []byte(body)})
			}
			runRounds(b, clients, batch, func(w int) error {
				if err := cl.QueueProduce(ctx, req); err != nil {
					return err
				}
				res, err := cl.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: name, BatchSize: int32(batch), ClientId: fmt.Sprint("c", w), RequestTimeout: "5s"})
				if err != nil {
					return err
				}
				ids := make([]string, len(res.Items))
				for i, it := range res.Items {
					ids[i] = it.Id
				}
				return cl.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: name, Partition: res.Partition, Ids: ids})
			})
		})
		b.Run(fmt.Sprintf("sqs/batch%d", batch), func(b *testing.B) {
			// CreateQueue of an existing queue with the same attributes
			// answers its URL: each run of this function may create it.
			q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(fmt.Sprint("sqs", batch))})
			if err != nil {
				b.Fatal(err)
			}
			var entries []types.SendMessageBatchRequestEntry
			for i := range batch {
				entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(body)})
			}
			runRounds(b, clients, batch, func(int) error {
				if batch == 1 {
					if _, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body)}); err != nil {
						return err
					}
				} else if _, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: entries}); err != nil {
					return err
				}
				got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: int32(batch), WaitTimeSeconds: 5})
				if err != nil {
					return err
				}
				if batch == 1 {
					for _, m := range got.Messages {
						if _, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
							return err
						}
					}
					return nil
				}
				del := make([]types.DeleteMessageBatchRequestEntry, len(got.Messages))
				for i, m := range got.Messages {
					del[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle}
				}
				_, err = c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl, Entries: del})
				return err
			})
		})
	}
}

// runRounds runs one round (send, receive, delete of batch messages) in each of
// clients goroutines until b.N messages have gone through.
func runRounds(b *testing.B, clients, batch int, round func(w int) error) {
	rounds := b.N/(clients*batch) + 1
	b.SetBytes(1024)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			for range rounds {
				if err := round(w); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
