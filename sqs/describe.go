package sqs

import (
	"encoding/base64"
	"maps"
	"slices"
	"strconv"

	"github.com/styxq/styx/internal/queue"
)

// Attribute groups of DescribeAttributes.
const (
	groupMessage = "SQS message"
	groupAttrs   = "SQS message attribute"
	groupSys     = "SQS message system attribute"
)

// DescribeAttributes is the queue.AttributeDescriber of the SQS API: the
// entries of the envelope it keeps in an item's attributes blob (ADR 0016),
// for the console and StorageItem.attributes. The envelope's format is the
// SQS API's alone, so its decoding lives here, and the daemon hands this
// function to the service (which does not import this package). It returns
// the MessageId, SentTimestamp (Unix milliseconds), SenderId (when set) and,
// for a message sent to a FIFO queue, its SequenceNumber and
// MessageDeduplicationId, then the message attributes and the message
// system attributes, each set sorted by name, Binary values in base64; nil
// for a blob that is not an SQS envelope.
func DescribeAttributes(blob []byte) []queue.ItemAttribute {
	e, ok := decodeEnvelope(blob)
	if !ok {
		return nil
	}
	out := []queue.ItemAttribute{
		{Group: groupMessage, Name: "MessageId", Value: e.ID},
		{Group: groupMessage, Name: "SentTimestamp", Value: strconv.FormatInt(e.Sent, 10)},
	}
	if e.Sender != "" {
		out = append(out, queue.ItemAttribute{Group: groupMessage, Name: "SenderId", Value: e.Sender})
	}
	if e.Seq != 0 {
		out = append(out, queue.ItemAttribute{Group: groupMessage, Name: "SequenceNumber", Value: strconv.FormatUint(e.Seq, 10)})
	}
	if e.Dedup != "" {
		out = append(out, queue.ItemAttribute{Group: groupMessage, Name: "MessageDeduplicationId", Value: e.Dedup})
	}
	for _, set := range []struct {
		group string
		attrs map[string]AttributeValue
	}{{groupAttrs, e.Attrs}, {groupSys, e.Sys}} {
		for _, name := range slices.Sorted(maps.Keys(set.attrs)) {
			v := set.attrs[name]
			a := queue.ItemAttribute{Group: set.group, Name: name, DataType: v.DataType}
			switch {
			case v.StringValue != nil:
				a.Value = *v.StringValue
			case v.BinaryValue != nil:
				a.Value = base64.StdEncoding.EncodeToString(v.BinaryValue)
			}
			out = append(out, a)
		}
	}
	return out
}
