package sqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestSQSMoveTaskBesideAPausedRedrive (issue 49, point 7): a move task
// over the items a paused /v1 redrive holds is refused, as SQS runs one
// active task per source queue, and the refusal says the other task is
// paused (it said "is running"); /v1's dead.redrive over the same items
// starts and leaves them to the paused task.
func TestSQSMoveTaskBesideAPausedRedrive(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "mv-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "mv", DeadQueue: "mv-dlq"})
		req := &pb.StorageItemsImportRequest{QueueName: "mv-dlq"}
		for i := range 5 {
			req.Items = append(req.Items, &pb.StorageItem{Payload: fmt.Appendf(nil, "m%d", i), SourceQueue: "mv", DeadReason: "expired",
				DeadAt: servertest.At(time.Now()), Attempts: 3})
		}
		_, err := s.C.StorageItemsImport(ctx, req)
		require.NoError(t, err)
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "mv-dlq", All: true, RateLimit: 1})
		require.NoError(t, err)
		_, err = s.C.RedrivesPause(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool {
			got, err := s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
			return err == nil && got.Status == "paused"
		}, "the redrive pauses")

		c := s.SQSClient("test", "test")
		_, err = c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String("arn:aws:sqs:us-east-1:000000000000:mv-dlq")})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "task '"+task.TaskId+"' is paused on queue 'mv-dlq'", "resume it")

		over, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "mv-dlq", All: true})
		require.NoError(t, err)
		require.Equal(t, map[string]int64{task.TaskId: over.Matched}, over.LeftTo)
	})
}
