package sqs_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
)

// TestSQSHiddenCharacters (issue 36, 8): through the AWS SDK, a tag key or
// value, a message attribute name and a message attribute DataType holding
// U+202E are refused with InvalidParameterValue naming the character, and
// the answer escapes what it quotes. Before, the tag and the DataType were
// stored, and the name was echoed with U+202E in it.
func TestSQSHiddenCharacters(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("tagged")})
		require.NoError(t, err)

		requireEscaped := func(t *testing.T, err error, parts ...string) {
			t.Helper()
			servertest.RequireSQSError(t, err, "InvalidParameterValue", append(parts, "U+202E", "bidi")...)
			require.NotContains(t, err.Error(), rlo)
		}
		t.Run("TagKey", func(t *testing.T) {
			_, err := c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: q.QueueUrl, Tags: map[string]string{"team" + rlo: "billing"}})
			requireEscaped(t, err, `Tag key 'team\u202e'`)
			_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("tagged2"), Tags: map[string]string{"owner" + rlo: "x"}})
			requireEscaped(t, err, `Tag key 'owner\u202e'`)
		})
		t.Run("TagValue", func(t *testing.T) {
			_, err := c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: q.QueueUrl, Tags: map[string]string{"team": "bill" + rlo + "ing"}})
			requireEscaped(t, err, "The value of tag 'team'", "at character 4")
		})
		send := func(attrs map[string]types.MessageAttributeValue) error {
			_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("hi"), MessageAttributes: attrs})
			return err
		}
		t.Run("AttributeName", func(t *testing.T) {
			err := send(map[string]types.MessageAttributeValue{"trace" + rlo: {DataType: aws.String("String"), StringValue: aws.String("v")}})
			requireEscaped(t, err, `Message attribute name 'trace\u202e'`, "at character 5")
		})
		t.Run("DataType", func(t *testing.T) {
			err := send(map[string]types.MessageAttributeValue{"trace": {DataType: aws.String("String.fdp" + rlo + "exe"), StringValue: aws.String("v")}})
			requireEscaped(t, err, `data type 'String.fdp\u202eexe'`, "at character 10")
			err = send(map[string]types.MessageAttributeValue{"trace": {DataType: aws.String("Binary." + rlo), BinaryValue: []byte{1}}})
			requireEscaped(t, err, "data type")
		})

		tags, err := c.ListQueueTags(ctx, &awssqs.ListQueueTagsInput{QueueUrl: q.QueueUrl})
		require.NoError(t, err)
		require.Empty(t, tags.Tags)
		require.Empty(t, s.Items("tagged"))
		_, err = c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("tagged2")})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.NonExistentQueue")

		// Visible non-ASCII text stays allowed in tags.
		_, err = c.TagQueue(ctx, &awssqs.TagQueueInput{QueueUrl: q.QueueUrl, Tags: map[string]string{"équipe": "facturation 請求"}})
		require.NoError(t, err)
	})
}

// TestSQSPolicyLimit (issue 36, 8): a queue Policy over SQS's quota of 8,192
// bytes is refused with InvalidAttributeValue naming the limit, on
// CreateQueue and SetQueueAttributes; one at the limit is stored. Before, a
// 20 MB policy was stored.
func TestSQSPolicyLimit(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		policy := func(n int) string {
			const head, tail = `{"Version":"2012-10-17","Statement":[],"Pad":"`, `"}`
			return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
		}
		_, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("p"), Attributes: map[string]string{"Policy": policy(8193)}})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "Policy", "8193 bytes", "the limit is 8192 bytes")
		_, err = c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("p")})
		servertest.RequireSQSError(t, err, "AWS.SimpleQueueService.NonExistentQueue")

		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("p"), Attributes: map[string]string{"Policy": policy(8192)}})
		require.NoError(t, err)
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q.QueueUrl, Attributes: map[string]string{"Policy": policy(1 << 20)}})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "Policy", "the limit is 8192 bytes")
		// A formatted policy may hold tabs and newlines, not U+202E.
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q.QueueUrl, Attributes: map[string]string{"Policy": "{\n\t\"Version\": \"2012-10-17\"\r\n}"}})
		require.NoError(t, err)
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: q.QueueUrl, Attributes: map[string]string{"Policy": `{"Sid":"` + rlo + `"}`}})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "Policy", "U+202E at character 8")

		attrs, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []types.QueueAttributeName{"Policy"}})
		require.NoError(t, err)
		require.Equal(t, "{\n\t\"Version\": \"2012-10-17\"\r\n}", attrs.Attributes["Policy"])
	})
}
