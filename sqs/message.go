package sqs

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/styxq/styx/internal/text"
)

// AttributeValue is a message attribute or message system attribute, in
// the shape of the SQS wire (MessageAttributeValue) and as stored in the
// envelope. DataType is String, Number or Binary, optionally followed by
// ".<custom type>"; String and Number carry StringValue, Binary carries
// BinaryValue (base64 on the wire, as encoding/json encodes []byte).
type AttributeValue struct {
	DataType    string  `json:"DataType"`
	StringValue *string `json:"StringValue,omitempty"`
	BinaryValue []byte  `json:"BinaryValue,omitempty"`
	// The list members exist in the SQS model but are "reserved for future
	// use"; SQS refuses them, and so does Styx.
	StringListValues []string `json:"StringListValues,omitempty"`
	BinaryListValues [][]byte `json:"BinaryListValues,omitempty"`
}

// envelope is what the SQS API stores in an item's opaque attributes blob
// (queue.ItemBody.Attributes, ADR 0016): the message's identity and
// attributes, carried unchanged by every move.
type envelope struct {
	// V is the format version, 1.
	V int `json:"v"`
	// ID is the MessageId, a random UUID given at send.
	ID string `json:"id"`
	// Sent is SentTimestamp, Unix milliseconds.
	Sent int64 `json:"sent"`
	// Sender is SenderId: the API key's name with --auth, else empty.
	Sender string                    `json:"sender,omitempty"`
	Attrs  map[string]AttributeValue `json:"attrs,omitempty"`
	Sys    map[string]AttributeValue `json:"sys,omitempty"`
	// Seq is the SequenceNumber of a message sent to a FIFO queue (the
	// sending node's, Handler.sequence); 0 otherwise.
	Seq uint64 `json:"seq,omitempty"`
	// Dedup is the MessageDeduplicationId of a message sent to a FIFO
	// queue: the one given, or the SHA-256 of the body (hex) with
	// ContentBasedDeduplication.
	Dedup string `json:"dedup,omitempty"`
}

func (e *envelope) encode() []byte {
	b, _ := json.Marshal(e)
	return b
}

// decodeEnvelope reads an item's blob; ok is false for an item without one
// (produced through /v1) or with a blob of another API.
func decodeEnvelope(b []byte) (envelope, bool) {
	var e envelope
	if len(b) == 0 || json.Unmarshal(b, &e) != nil || e.V != 1 || e.ID == "" {
		return envelope{}, false
	}
	return e, true
}

// newMessageID returns a random (version 4) UUID.
func newMessageID() string { return uuidString(newUUID()) }

// newUUID returns the bytes of a random (version 4) UUID.
func newUUID() [16]byte {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

func uuidString(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// derivedMessageID is the MessageId of an item without an envelope: a UUID
// made from the queue's id and the item's current id (stable until the
// item is requeued, when its id changes).
func derivedMessageID(queueID uint64, itemID uint64) string {
	var u [16]byte
	binary.BigEndian.PutUint64(u[:8], queueID)
	binary.BigEndian.PutUint64(u[8:], itemID)
	u[6] = u[6]&0x0f | 0x80 // version 8: a custom UUID
	u[8] = u[8]&0x3f | 0x80
	return uuidString(u)
}

// md5Hex is the hex MD5 of b (MD5OfMessageBody).
func md5Hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// md5OfAttributes is MD5OfMessageAttributes (and MD5OfMessageSystem-
// Attributes) exactly as SQS computes it: over the attributes sorted by
// name, each as its name, its data type (each a 4-byte big-endian length and
// the UTF-8 bytes), a transport byte (1 for String and Number types, 2 for
// Binary) and its value (length and bytes). "" when there are none.
func md5OfAttributes(attrs map[string]AttributeValue) string {
	if len(attrs) == 0 {
		return ""
	}
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	slices.Sort(names)
	var b []byte
	field := func(p []byte) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	for _, n := range names {
		a := attrs[n]
		field([]byte(n))
		field([]byte(a.DataType))
		if strings.HasPrefix(a.DataType, "Binary") {
			b = append(b, 2)
			field(a.BinaryValue)
		} else {
			b = append(b, 1)
			field([]byte(derefString(a.StringValue)))
		}
	}
	return md5Hex(b)
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Limits of SQS messages.
const (
	// maxMessageAttributes is the most message attributes of one message.
	maxMessageAttributes = 10
	// maxAttributeNameLength bounds a message attribute's name, and
	// maxDataTypeLength its data type, in characters.
	maxAttributeNameLength = 256
	maxDataTypeLength      = 256
)

// checkAttributes validates message attributes as SQS does and returns
// their size in bytes (names, types and values count toward the message
// size). system restricts the names to AWSTraceHeader.
func checkAttributes(field string, attrs map[string]AttributeValue, system bool) (int, error) {
	if !system && len(attrs) > maxMessageAttributes {
		return 0, invalidParameter("Number of message attributes [%d] exceeds the allowed maximum [%d].", len(attrs), maxMessageAttributes)
	}
	size := 0
	for name, a := range attrs {
		if system {
			if name != "AWSTraceHeader" {
				return 0, invalidParameter("Message system attribute name '%s' is invalid; the only one is AWSTraceHeader.", text.Escape(name))
			}
			if a.DataType != "String" {
				return 0, invalidParameter("Message system attribute AWSTraceHeader must have the data type String.")
			}
		} else if err := checkAttributeName(name); err != nil {
			return 0, err
		}
		if len(a.StringListValues) > 0 || len(a.BinaryListValues) > 0 {
			return 0, invalidParameter("Message attribute '%s': the list values are reserved for future use and are not supported.", name)
		}
		base, custom, _ := strings.Cut(a.DataType, ".")
		if a.DataType == "" {
			return 0, invalidParameter("The message attribute '%s' must contain a non-empty attribute type.", name)
		}
		if utf8.RuneCountInString(a.DataType) > maxDataTypeLength {
			return 0, invalidParameter("Message attribute '%s' has a data type longer than %d characters.", name, maxDataTypeLength)
		}
		if err := text.Check(a.DataType); err != nil {
			return 0, invalidParameter("Message attribute '%s' has a data type '%s' that holds %v; %s.", name, text.Escape(a.DataType), err, text.Rule)
		}
		if strings.Contains(a.DataType, ".") && custom == "" {
			return 0, invalidParameter("Message attribute '%s' has an invalid data type '%s'.", name, a.DataType)
		}
		switch base {
		case "String", "Number":
			if a.StringValue == nil || *a.StringValue == "" {
				return 0, invalidParameter("The message attribute '%s' with type '%s' must contain a non-empty value of type String.", name, base)
			}
			if a.BinaryValue != nil {
				return 0, invalidParameter("The message attribute '%s' with type '%s' must not contain a BinaryValue.", name, base)
			}
			if err := checkText(*a.StringValue); err != nil {
				return 0, invalidParameter("The message attribute '%s' contains characters outside the allowed set: %v.", name, err)
			}
			if base == "Number" {
				if err := checkNumber(*a.StringValue); err != nil {
					return 0, invalidParameter("Can't cast the value of message (user) attribute '%s' to a number: %v.", name, err)
				}
			}
			size += len(*a.StringValue)
		case "Binary":
			if len(a.BinaryValue) == 0 {
				return 0, invalidParameter("The message attribute '%s' with type 'Binary' must contain a non-empty value of type Binary.", name)
			}
			if a.StringValue != nil {
				return 0, invalidParameter("The message attribute '%s' with type 'Binary' must not contain a StringValue.", name)
			}
			size += len(a.BinaryValue)
		default:
			// AWS's words (moto's and LocalStack's too).
			return 0, invalidParameter("The message attribute '%s' has an invalid message attribute type, the set of supported type prefixes is Binary, Number, and String.", name)
		}
		size += len(name) + len(a.DataType)
	}
	return size, nil
}

// checkAttributeName applies SQS's rules for message attribute names. A
// hidden character (internal/text) is named as such, and the name is
// escaped in every answer.
func checkAttributeName(name string) error {
	if name == "" || utf8.RuneCountInString(name) > maxAttributeNameLength {
		return invalidParameter("Message attribute name '%s' must be 1 to %d characters long.", text.Escape(name), maxAttributeNameLength)
	}
	if err := text.Check(name); err != nil {
		return invalidParameter("Message attribute name '%s' holds %v; %s.", text.Escape(name), err, text.Rule)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			// AWS's words (moto's and LocalStack's too).
			return invalidParameter("The message attribute name '%s' is invalid. Attribute name can contain A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.) characters.", name)
		}
	}
	lower := strings.ToLower(name)
	switch {
	case strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon."):
		return invalidParameter("Message attribute name '%s' must not start with 'AWS.' or 'Amazon.' (reserved).", name)
	case strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, ".."):
		return invalidParameter("Message attribute name '%s' must not start or end with a period nor contain two periods in a row.", name)
	}
	return nil
}

// checkText reports the first character SQS does not allow in a message:
// it allows #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD and #x10000
// to #x10FFFF (and valid UTF-8).
func checkText(s string) error {
	for i, c := range s {
		switch {
		case c == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return fmt.Errorf("invalid UTF-8 at byte %d", i)
		case c == 0x9 || c == 0xA || c == 0xD,
			c >= 0x20 && c <= 0xD7FF,
			c >= 0xE000 && c <= 0xFFFD,
			c >= 0x10000 && c <= 0x10FFFF:
		default:
			return fmt.Errorf("character #x%X at byte %d", c, i)
		}
	}
	return nil
}

// checkNumber accepts what SQS's Number type accepts: a decimal number
// (optionally signed, with a fraction and an exponent) of at most 38
// significant digits.
func checkNumber(s string) error {
	if _, ok := new(big.Float).SetString(s); !ok || strings.ContainsAny(s, "xXpP_") || strings.EqualFold(strings.TrimLeft(s, "+-"), "inf") {
		return fmt.Errorf("'%s' is not a number", s)
	}
	digits := 0
	mant, _, _ := strings.Cut(strings.ToLower(s), "e")
	for _, c := range strings.TrimLeft(strings.ReplaceAll(strings.TrimLeft(mant, "+-"), ".", ""), "0") {
		if c >= '0' && c <= '9' {
			digits++
		}
	}
	if digits > 38 {
		return fmt.Errorf("'%s' has more than 38 significant digits", s)
	}
	return nil
}

// selectAttributes returns the message attributes names asks for: "All" or
// ".*" for all, "<prefix>.*" for those whose name starts with <prefix>
// ("Custom.*" selects Custom1 and Custom.a), or exact names.
func selectAttributes(attrs map[string]AttributeValue, names []string) map[string]AttributeValue {
	if len(attrs) == 0 || len(names) == 0 {
		return nil
	}
	out := map[string]AttributeValue{}
	for n, a := range attrs {
		for _, want := range names {
			if want == "All" || want == ".*" || n == want ||
				strings.HasSuffix(want, ".*") && strings.HasPrefix(n, strings.TrimSuffix(want, ".*")) {
				out[n] = a
				break
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
