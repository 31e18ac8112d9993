package sqs_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/servertest"
)

// TestSQSUncoveredQueuesHidden (issue 48, 6): a key limited to "orders*"
// and "shared-*" never reads the name of "payroll-secret", which sends its
// dead items to the same dead-letter queue: a message received from that
// queue carries no DeadLetterQueueSourceArn; the refusals of DeleteQueue
// and SetQueueAttributes say "one or more queues the key does not cover"
// instead of naming them; GetQueueAttributes shows the ARN of
// auth.HiddenQueue for a RedrivePolicy's dead-letter queue and a
// RedriveAllowPolicy's sources the key does not cover, and
// ListMessageMoveTasks for a task's destination. The admin key sees the
// real ARNs.
func TestSQSUncoveredQueuesHidden(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, admin := servertest.StartSQSAuth(t, b)
		root := s.SQSClient("bootstrap-admin", admin)
		arn := func(name string) string { return "arn:aws:sqs:us-east-1:000000000000:" + name }
		url := func(name string) *string { return aws.String(s.Endpoint + "/000000000000/" + name) }
		create := func(name, dlq string) {
			t.Helper()
			in := &awssqs.CreateQueueInput{QueueName: aws.String(name)}
			if dlq != "" {
				in.Attributes = map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + arn(dlq) + `","maxReceiveCount":"1"}`}
			}
			_, err := root.CreateQueue(ctx, in)
			require.NoError(t, err)
		}
		create("shared-dead", "")
		create("shared-other", "")
		create("orders", "shared-dead")
		create("payroll-secret", "shared-dead")
		create("payroll-dlq", "")
		create("shared-mid", "payroll-dlq")

		// A message of payroll-secret received once and made visible again:
		// dead-lettered into shared-dead.
		_, err := root.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url("payroll-secret"), MessageBody: aws.String("salary")})
		require.NoError(t, err)
		got, err := root.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url("payroll-secret"), WaitTimeSeconds: 5})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		_, err = root.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: url("payroll-secret"),
			ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 0})
		require.NoError(t, err)
		s.WaitItems("shared-dead", 1)

		key := s.NewKey("orders-oncall", []string{"admin"}, "orders*", "shared-*")
		id, ok := auth.KeyID(key)
		require.True(t, ok)
		c := s.SQSClient(id, key)
		all := []types.MessageSystemAttributeName{"All"}

		t.Run("DeadLetterQueueSourceArn", func(t *testing.T) {
			got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url("shared-dead"), WaitTimeSeconds: 5,
				MessageSystemAttributeNames: all, VisibilityTimeout: 1})
			require.NoError(t, err)
			require.Len(t, got.Messages, 1)
			require.Equal(t, "salary", aws.ToString(got.Messages[0].Body))
			require.NotContains(t, got.Messages[0].Attributes, "DeadLetterQueueSourceArn")
			for _, v := range got.Messages[0].Attributes {
				require.NotContains(t, v, "payroll")
			}
			_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: url("shared-dead"),
				ReceiptHandle: got.Messages[0].ReceiptHandle, VisibilityTimeout: 0})
			require.NoError(t, err)
			// The admin key sees it.
			got, err = root.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url("shared-dead"), WaitTimeSeconds: 5,
				MessageSystemAttributeNames: all, VisibilityTimeout: 1})
			require.NoError(t, err)
			require.Len(t, got.Messages, 1)
			require.Equal(t, arn("payroll-secret"), got.Messages[0].Attributes["DeadLetterQueueSourceArn"])
		})
		t.Run("DeleteQueue", func(t *testing.T) {
			_, err := c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: url("shared-dead")})
			servertest.RequireSQSError(t, err, "InvalidParameterValue", "it is the dead_queue of 'orders' and one or more queues the key does not cover")
			require.NotContains(t, err.Error(), "payroll")
		})
		t.Run("SetQueueAttributesRedrivePolicyOfADeadLetterQueue", func(t *testing.T) {
			_, err := c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: url("shared-dead"),
				Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + arn("shared-other") + `","maxReceiveCount":"1"}`}})
			require.Error(t, err)
			require.Contains(t, err.Error(), "is the dead_queue of 'orders' and one or more queues the key does not cover")
			require.NotContains(t, err.Error(), "payroll")
		})
		t.Run("SetQueueAttributesRedrivePolicyChained", func(t *testing.T) {
			_, err := c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: url("orders"),
				Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + arn("shared-mid") + `","maxReceiveCount":"1"}`}})
			require.Error(t, err)
			require.Contains(t, err.Error(), "a queue the key does not cover")
			require.NotContains(t, err.Error(), "payroll")
		})
		t.Run("SetQueueAttributesRedriveAllowPolicy", func(t *testing.T) {
			_, err := c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: url("shared-dead"),
				Attributes: map[string]string{"RedriveAllowPolicy": `{"redrivePermission":"byQueue","sourceQueueArns":["` + arn("orders") + `"]}`}})
			servertest.RequireSQSError(t, err, "InvalidAttributeValue", "a queue the key does not cover names this queue in its RedrivePolicy")
			require.NotContains(t, err.Error(), "payroll")
		})
		// The dead-letter queue of a queue the key covers, when the key
		// does not cover it: the ARN of auth.HiddenQueue, as /v1's
		// dead_queue.
		t.Run("GetQueueAttributesRedrivePolicy", func(t *testing.T) {
			got, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url("shared-mid"),
				AttributeNames: []types.QueueAttributeName{"All"}})
			require.NoError(t, err)
			require.Equal(t, `{"deadLetterTargetArn":"`+arn(auth.HiddenQueue)+`","maxReceiveCount":1}`, got.Attributes["RedrivePolicy"])
			for _, v := range got.Attributes {
				require.NotContains(t, v, "payroll")
			}
			got, err = c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url("orders"),
				AttributeNames: []types.QueueAttributeName{"RedrivePolicy"}})
			require.NoError(t, err)
			require.Contains(t, got.Attributes["RedrivePolicy"], arn("shared-dead"), "a covered dead-letter queue is named")
			got, err = root.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url("shared-mid"),
				AttributeNames: []types.QueueAttributeName{"RedrivePolicy"}})
			require.NoError(t, err)
			require.Contains(t, got.Attributes["RedrivePolicy"], arn("payroll-dlq"))
		})
		// A RedriveAllowPolicy naming sources the key does not cover: one
		// ARN of auth.HiddenQueue for them all.
		t.Run("GetQueueAttributesRedriveAllowPolicy", func(t *testing.T) {
			policy := `{"redrivePermission":"byQueue","sourceQueueArns":["` + arn("orders") + `","` + arn("payroll-secret") +
				`","` + arn("payroll-more") + `"]}`
			_, err := root.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: url("shared-dead"),
				Attributes: map[string]string{"RedriveAllowPolicy": policy}})
			require.NoError(t, err)
			got, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url("shared-dead"),
				AttributeNames: []types.QueueAttributeName{"RedriveAllowPolicy"}})
			require.NoError(t, err)
			require.JSONEq(t, `{"redrivePermission":"byQueue","sourceQueueArns":["`+arn("orders")+`","`+arn(auth.HiddenQueue)+`"]}`,
				got.Attributes["RedriveAllowPolicy"])
			got, err = root.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url("shared-dead"),
				AttributeNames: []types.QueueAttributeName{"RedriveAllowPolicy"}})
			require.NoError(t, err)
			require.Equal(t, policy, got.Attributes["RedriveAllowPolicy"])
		})
		// A move task an admin started to a queue the key does not cover.
		t.Run("ListMessageMoveTasksDestinationArn", func(t *testing.T) {
			_, err := root.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String(arn("shared-dead")),
				DestinationArn: aws.String(arn("payroll-dlq"))})
			require.NoError(t, err)
			got, err := c.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: aws.String(arn("shared-dead"))})
			require.NoError(t, err)
			require.Len(t, got.Results, 1)
			require.Equal(t, arn(auth.HiddenQueue), aws.ToString(got.Results[0].DestinationArn))
			require.NotContains(t, aws.ToString(got.Results[0].FailureReason), "payroll")
			all, err := root.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: aws.String(arn("shared-dead"))})
			require.NoError(t, err)
			require.Equal(t, arn("payroll-dlq"), aws.ToString(all.Results[0].DestinationArn))
		})
	})
}
