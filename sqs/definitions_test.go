package sqs_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestRedriveAllowPolicyOnV1: a dead-letter queue's RedriveAllowPolicy,
// set through the SQS API, is a rule of the queue definitions (issue 50):
// /v1's queues.create and queues.update that name the queue as a
// dead_queue are refused by it (400 naming dead_queue), as SQS's
// RedrivePolicy is, and the SQS API cannot shut out a queue /v1 made a
// source. The FIFO rule (a FIFO queue's dead-letter queue is a FIFO queue)
// is the SQS API's only: /v1 pairs an ordered queue with a plain one.
func TestRedriveAllowPolicyOnV1(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("any", "any")
		arn := func(name string) string { return "arn:aws:sqs:us-east-1:000000000000:" + name }
		create := func(name, policy string) {
			_, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name),
				Attributes: map[string]string{"RedriveAllowPolicy": policy}})
			require.NoError(t, err)
		}
		create("closed-dlq", `{"redrivePermission":"denyAll"}`)
		create("picky-dlq", `{"redrivePermission":"byQueue","sourceQueueArns":["`+arn("orders")+`"]}`)

		err := s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "billing", DeadQueue: "closed-dlq"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid dead_queue; queue 'closed-dlq' does not accept dead items from 'billing'",
			"RedriveAllowPolicy")
		err = s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "billing", DeadQueue: "picky-dlq"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid dead_queue; queue 'picky-dlq' does not accept dead items from 'billing'")
		require.NoError(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "billing"}))
		err = s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "billing", DeadQueue: "picky-dlq"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid dead_queue; queue 'picky-dlq' does not accept dead items from 'billing'")
		info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "billing"})
		require.NoError(t, err)
		require.Empty(t, info.DeadQueue, "the refused update changed nothing")

		// The queue the policy names may.
		require.NoError(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders", DeadQueue: "picky-dlq"}))
		// And the dead-letter queue's side: SQS cannot shut it out now.
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(s.Endpoint + "/000000000000/picky-dlq"),
			Attributes: map[string]string{"RedriveAllowPolicy": `{"redrivePermission":"denyAll"}`}})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "queue orders names this queue in its RedrivePolicy")

		// SQS-only: the FIFO kinds. /v1 makes an ordered queue with a
		// plain dead-letter queue; the SQS API would refuse it.
		require.NoError(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "plain-dlq"}))
		require.NoError(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "jobs", Ordered: true, DeadQueue: "plain-dlq"}))
	})
}
