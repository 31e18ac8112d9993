package sqs

import (
	"bytes"
	"encoding/base64"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/styxq/styx/internal/queue"
)

func str(s string) *string { return &s }

// TestMD5OfAttributes checks the attribute digest against values computed
// by other implementations that the SDKs accept.
func TestMD5OfAttributes(t *testing.T) {
	require.Equal(t, "d21ae90c49061e927f57df5f5d72be1f", md5OfAttributes(map[string]AttributeValue{
		"ordinal":  {DataType: "Number", StringValue: str("1")},
		"category": {DataType: "String", StringValue: str("test")},
	}))
	require.Equal(t, "cd28f3b68aeee4b2eac9c66f2f694b58", md5OfAttributes(map[string]AttributeValue{
		"SellerName": {DataType: "String", StringValue: str("Example Store")},
	}))
	require.Empty(t, md5OfAttributes(nil))
}

func TestCheckNumber(t *testing.T) {
	for _, ok := range []string{"1", "-1.5", "+3e10", "0.000", "12345678901234567890123456789012345678"} {
		require.NoError(t, checkNumber(ok), ok)
	}
	for _, bad := range []string{"", "abc", "0x10", "inf", "NaN", "1_000", "123456789012345678901234567890123456789"} {
		require.Error(t, checkNumber(bad), bad)
	}
}

func TestReceiptHandle(t *testing.T) {
	it := queue.LeasedItem{ID: 99, FirstID: 42, Attempts: 3}
	h := encodeHandle(7, 2, it)
	got, err := decodeHandle(infoWith(7, 3), h)
	require.NoError(t, err)
	require.Equal(t, handle{queueID: 7, partition: 2, receipt: queue.Receipt{ID: 99, FirstID: 42, Attempts: 3}}, got)
	// A handle of format 1 (before first ids) is still read.
	got, err = decodeHandle(infoWith(7, 3), base64.RawURLEncoding.EncodeToString([]byte("1:7:2:99")))
	require.NoError(t, err)
	require.Equal(t, handle{queueID: 7, partition: 2, receipt: queue.Receipt{ID: 99}}, got)
	for _, bad := range []string{"x", "!!", encodeHandle(8, 2, it), encodeHandle(7, 3, it),
		base64.RawURLEncoding.EncodeToString([]byte("2:7:2:99"))} {
		_, err := decodeHandle(infoWith(7, 3), bad)
		var e *Error
		require.ErrorAs(t, err, &e, bad)
		require.Equal(t, "ReceiptHandleIsInvalid", e.Type)
	}
}

func infoWith(id uint64, partitions int32) queue.QueueInfo {
	return queue.QueueInfo{ID: id, Partitions: partitions}
}

func TestSelectAttributes(t *testing.T) {
	attrs := map[string]AttributeValue{"ns.a": {}, "ns.b": {}, "nsx": {}, "other": {}}
	keys := func(m map[string]AttributeValue) []string { return slices.Sorted(maps.Keys(m)) }
	// "<prefix>.*" selects the names that start with <prefix> (AWS's rule).
	require.Equal(t, []string{"ns.a", "ns.b", "nsx"}, keys(selectAttributes(attrs, []string{"ns.*"})))
	require.Equal(t, []string{"ns.a", "ns.b"}, keys(selectAttributes(attrs, []string{"ns..*"})))
	require.Equal(t, []string{"ns.a", "ns.b", "nsx", "other"}, keys(selectAttributes(attrs, []string{"All"})))
	require.Equal(t, []string{"ns.a", "ns.b", "nsx", "other"}, keys(selectAttributes(attrs, []string{".*"})))
	require.Equal(t, []string{"other"}, keys(selectAttributes(attrs, []string{"other", "missing"})))
	require.Nil(t, selectAttributes(attrs, nil))
}

func TestSameRedrivePolicy(t *testing.T) {
	a := `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:d","maxReceiveCount":"2"}`
	require.True(t, sameRedrivePolicy(a, `{"maxReceiveCount":2,"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:d"}`))
	require.False(t, sameRedrivePolicy(a, `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:d","maxReceiveCount":3}`))
	require.False(t, sameRedrivePolicy(a, ""))
	require.True(t, sameRedrivePolicy("", ""))
}

// TestReceiveAnswerWrittenAsMarshalled: the ReceiveMessage answer written a
// message at a time (writeJSON, writeXML) is byte for byte what marshalJSON
// and toXML make of it, with no messages, one, and several with characters
// JSON and XML escape.
func TestReceiveAnswerWrittenAsMarshalled(t *testing.T) {
	msg := func(body string) message {
		return message{MessageID: "id-" + body, ReceiptHandle: "h", MD5OfBody: md5Hex([]byte(body)), Body: body,
			Attributes: map[string]string{"SentTimestamp": "1", "ApproximateReceiveCount": "2"}}
	}
	withAttrs := msg("a\nb")
	withAttrs.MessageAttributes = map[string]AttributeValue{"b": {DataType: "String", StringValue: str("x & y")},
		"a": {DataType: "Binary", BinaryValue: []byte{0, 1, 2}}}
	withAttrs.MD5OfMessageAttributes = md5OfAttributes(withAttrs.MessageAttributes)
	for _, out := range []receiveMessageOutput{
		{},
		{Messages: []message{msg("<one & \"only\">")}},
		{Messages: []message{withAttrs, msg("\u2028"), msg(strings.Repeat("<", 70_000))}},
	} {
		want, err := marshalJSON(out)
		require.NoError(t, err)
		var got bytes.Buffer
		require.NoError(t, out.writeJSON(&got))
		require.Equal(t, string(want), got.String())
		want, err = toXML("ReceiveMessage", out, "request-1")
		require.NoError(t, err)
		got.Reset()
		require.NoError(t, out.writeXML(&got, "request-1"))
		require.Equal(t, string(want), got.String())
	}
}
