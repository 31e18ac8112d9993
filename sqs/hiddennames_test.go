package sqs_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/styxtest"
)

// TestSQSUncoveredQueuesHidden (issue 48, 6): a key limited to "orders*"
// and "shared-*" never reads the name of "payroll-secret", which sends its
// dead items to the same dead-letter queue: a message received from that
// queue carries no DeadLetterQueueSourceArn, and the refusals of
// DeleteQueue and SetQueueAttributes count the queues they would name
// instead of naming them. The admin key sees the source's ARN.
func TestSQSUncoveredQueuesHidden(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b styxtest.Options) {
		s, admin := startSQSAuth(t, b)
		root := s.sqsClient("bootstrap-admin", admin)
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
		s.waitItems("shared-dead", 1)

		key := s.newKey("orders-oncall", []string{"admin"}, "orders*", "shared-*")
		id, ok := auth.KeyID(key)
		require.True(t, ok)
		c := s.sqsClient(id, key)
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
			requireSQSError(t, err, "InvalidParameterValue", "it is the dead_queue of 'orders' and a queue the key does not cover")
			require.NotContains(t, err.Error(), "payroll")
		})
		t.Run("SetQueueAttributesRedrivePolicyOfADeadLetterQueue", func(t *testing.T) {
			_, err := c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: url("shared-dead"),
				Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + arn("shared-other") + `","maxReceiveCount":"1"}`}})
			require.Error(t, err)
			require.Contains(t, err.Error(), "a queue the key does not cover")
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
			requireSQSError(t, err, "InvalidAttributeValue", "a queue the key does not cover names this queue in its RedrivePolicy")
			require.NotContains(t, err.Error(), "payroll")
		})
	})
}
