package sqs_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestScopeBothDoors: which queues a key may touch is one rule
// (auth.Authorize) behind both doors (issue 50). A key of the queues "a*"
// makes the same calls on "a" and on "b" through /v1 and through SQS: on
// "a" they are served, on "b" each door answers 403 (AccessDenied on SQS)
// naming the call as its client made it (the /v1 path, the SQS action),
// whether the queue exists or not; and a call on a redrive task of "b"'s
// dead-letter queue is refused by the same rule once the task is found,
// naming that call (redrives.cancel as itself).
func TestScopeBothDoors(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, admin := servertest.StartSQSAuth(t, b)
		for _, q := range []string{"a-dead", "b-dead"} {
			s.CreateQueue(&pb.QueueInfo{QueueName: q})
		}
		s.CreateQueue(&pb.QueueInfo{QueueName: "a", DeadQueue: "a-dead"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "b", DeadQueue: "b-dead"})
		key := s.NewKey("a-only", []string{"produce", "consume", "dead", "read"}, "a*")
		v1 := s.Client(key)
		id, ok := auth.KeyID(key)
		require.True(t, ok)
		sq := s.SQSClient(id, key)
		url := func(name string) *string { return aws.String(s.Endpoint + "/000000000000/" + name) }
		refused := func(queue, call, scope string) string {
			return "forbidden; key 'a-only' has scope '" + scope + "' only for queues 'a*', not for '" + queue + "', which " + call + " needs"
		}

		t.Run("v1", func(t *testing.T) {
			produce := func(q string) error {
				return v1.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: q, RequestTimeout: "5s",
					Items: []*pb.QueueProduceItem{{Utf8: "x"}}})
			}
			require.NoError(t, produce("a"))
			for _, q := range []string{"b", "no-such-queue"} {
				servertest.RequireCode(t, produce(q), styx.CodeForbidden, refused(q, "/v1/queue.produce", "produce"))
			}
			_, err := v1.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "b", BatchSize: 1, ClientId: "c", RequestTimeout: "1s"})
			servertest.RequireCode(t, err, styx.CodeForbidden, refused("b", "/v1/queue.lease", "consume"))
			_, err = v1.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "b"})
			servertest.RequireCode(t, err, styx.CodeForbidden, refused("b", "/v1/queue.stats", "read"))
			_, err = v1.DeadList(ctx, &pb.DeadListRequest{QueueName: "b-dead"})
			servertest.RequireCode(t, err, styx.CodeForbidden, refused("b-dead", "/v1/dead.list", "dead"))
			// A queue named in another field than queue_name.
			_, err = v1.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "a-dead", Destination: "b", DryRun: true})
			servertest.RequireCode(t, err, styx.CodeForbidden, refused("b", "/v1/dead.redrive", "dead"))
		})

		t.Run("sqs", func(t *testing.T) {
			_, err := sq.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url("a"), MessageBody: aws.String("x")})
			require.NoError(t, err)
			for _, q := range []string{"b", "no-such-queue"} {
				_, err = sq.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url(q), MessageBody: aws.String("x")})
				servertest.RequireSQSError(t, err, "AccessDenied", refused(q, "SendMessage", "produce"))
			}
			_, err = sq.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url("b")})
			servertest.RequireSQSError(t, err, "AccessDenied", refused("b", "ReceiveMessage", "consume"))
			_, err = sq.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url("b")})
			servertest.RequireSQSError(t, err, "AccessDenied", refused("b", "GetQueueAttributes", "read"))
			_, err = sq.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String("arn:aws:sqs:us-east-1:000000000000:a-dead"),
				DestinationArn: aws.String("arn:aws:sqs:us-east-1:000000000000:b")})
			servertest.RequireSQSError(t, err, "AccessDenied", refused("b", "StartMessageMoveTask", "dead"))
			// The scope, before the body is looked at.
			_, err = sq.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: url("a")})
			servertest.RequireSQSError(t, err, "AccessDenied", "forbidden; key 'a-only' lacks scope 'admin', which PurgeQueue needs")
		})

		t.Run("redrive task", func(t *testing.T) {
			// A task of b-dead, started by the admin key through each door;
			// the key is refused on it once the task is found.
			task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "b-dead", All: true})
			require.NoError(t, err)
			for _, c := range []struct {
				path string
				call func(*pb.RedriveTaskRequest) (*pb.RedriveTask, error)
			}{
				{"/v1/redrives.get", func(r *pb.RedriveTaskRequest) (*pb.RedriveTask, error) { return v1.RedrivesGet(ctx, r) }},
				{"/v1/redrives.cancel", func(r *pb.RedriveTaskRequest) (*pb.RedriveTask, error) { return v1.RedrivesCancel(ctx, r) }},
				{"/v1/redrives.pause", func(r *pb.RedriveTaskRequest) (*pb.RedriveTask, error) { return v1.RedrivesPause(ctx, r) }},
				{"/v1/redrives.resume", func(r *pb.RedriveTaskRequest) (*pb.RedriveTask, error) { return v1.RedrivesResume(ctx, r) }},
			} {
				_, err := c.call(&pb.RedriveTaskRequest{TaskId: task.TaskId})
				servertest.RequireCode(t, err, styx.CodeForbidden, refused("b-dead", c.path, "dead"))
			}

			root := s.SQSClient("bootstrap-admin", admin)
			started, err := root.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{
				SourceArn: aws.String("arn:aws:sqs:us-east-1:000000000000:b-dead")})
			require.NoError(t, err)
			_, err = sq.CancelMessageMoveTask(ctx, &awssqs.CancelMessageMoveTaskInput{TaskHandle: started.TaskHandle})
			servertest.RequireSQSError(t, err, "AccessDenied", refused("b-dead", "CancelMessageMoveTask", "dead"))
		})
	})
}
