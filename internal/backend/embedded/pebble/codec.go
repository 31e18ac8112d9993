package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// Value encodings. Every value starts with a format byte (1 for all kinds,
// except 2 for queue infos written since namespaces and for bodies with
// attributes) so that a later layout
// can be told apart. Integers are varints
// (signed ones zig-zag encoded, as encoding/binary does) unless noted,
// strings and byte slices are a uvarint length followed by the bytes, and a
// time is its Unix nanoseconds, so times must lie between the years 1678
// and 2262; encoders reject others rather than corrupt them. Each append
// function documents its layout.

const formatV1 = 1

// formatInfoV2 is the queue-info format that adds the namespace; queue
// infos written as formatV1 are still read.
const formatInfoV2 = 2

// formatInfoV3 is the queue-info format that adds Attributes (ADR 0016).
const formatInfoV3 = 3

// formatInfoV4 is the queue-info format that adds DeduplicationWindow.
const formatInfoV4 = 4

// formatInfoV5 is the queue-info format that adds Ordered and
// GroupDeadPolicy (item groups, issue 37).
const formatInfoV5 = 5

// formatInfoV6 is the queue-info format that adds PausedAt (a queue's
// paused consumption, issue 49).
const formatInfoV6 = 6

// formatMetaV2 is the meta format that adds Group and GroupSeq (item
// groups, issue 37); an item without a group is still written as formatV1,
// and both are read.
const formatMetaV2 = 2

// formatMetaV3 is the meta format that adds FirstLeasedAt (issue 51); an
// item never leased is still written as formatV1 or formatMetaV2, and all
// three are read (an item without it reads as never leased).
const formatMetaV3 = 3

// formatMetaV4 is the meta format that adds the lease's Holder (issue 49):
// formatMetaV3's fields, then the holder's client id and key name. Written
// only for a leased item whose holder is known (a state record); the
// older formats are still written and read.
const formatMetaV4 = 4

// formatBodyV2 is the body format that adds Attributes (ADR 0016); a body
// without attributes is still written as formatV1, and both are read.
const formatBodyV2 = 2

// formatErrorsV2 is the attempt-history format that adds the DLQ attempt
// history (queue.ItemErrors.DeadLetter); a history without DLQ attempts is
// still written as formatV1, and both are read.
const formatErrorsV2 = 2

// Meta flag bits.
const (
	metaLeased         = 1 << iota // ItemMeta.Leased
	metaLeaseDeadline              // LeaseDeadline is set
	metaEnqueueAt                  // EnqueueAt is set
	metaExpireDeadline             // ExpireDeadline is set
	metaCreatedAt                  // CreatedAt is set
	metaSourceKey                  // SourceKey is not empty
	metaDead                       // DeadReason or DeadAt is set
	metaFingerprint                // Fingerprint is not empty
	metaAllFlags       = 1<<iota - 1
)

// Time tags, for the values other than metadata.
const (
	timeZero = 0 // a zero time.Time, nothing follows
	timeSet  = 1 // a varint of Unix nanoseconds follows
)

var errTimeRange = errors.New("time outside the years 1678-2262 cannot be stored")

// nanos returns t as Unix nanoseconds, or an error if that loses anything.
func nanos(t time.Time) (int64, error) {
	n := t.UnixNano()
	if !time.Unix(0, n).Equal(t) {
		return 0, fmt.Errorf("%w: %s", errTimeRange, t)
	}
	return n, nil
}

// appendMeta appends the encoding of m without its ID, which is in the key:
//
//	format byte, flags byte,
//	varint ID-BodyID (two's complement difference, usually 0),
//	varint Attempts,
//	[8 bytes LE CreatedAt]             if flag metaCreatedAt,
//	[varint LeaseDeadline-CreatedAt]   if flag metaLeaseDeadline,
//	[varint EnqueueAt-CreatedAt]       if flag metaEnqueueAt,
//	[varint ExpireDeadline-CreatedAt]  if flag metaExpireDeadline,
//	[uvarint len, SourceKey]           if flag metaSourceKey,
//	[uvarint len, DeadReason,
//	 time tag, [varint DeadAt-CreatedAt]] if flag metaDead,
//	[uvarint len, Fingerprint]         if flag metaFingerprint,
//	formatMetaV2 only: uvarint len, Group, varint BodyID-GroupSeq (two's
//	complement difference, usually 0),
//	formatMetaV3 and V4: uvarint len, Group, [varint BodyID-GroupSeq if
//	Group is not empty], varint FirstLeasedAt-CreatedAt,
//	formatMetaV4 only: uvarint len, Holder.ClientID, uvarint len,
//	Holder.KeyName.
//
// The format byte is formatMetaV4 when Holder is set, else formatMetaV3
// when FirstLeasedAt is set, else
// formatMetaV2 when Group is not empty, else formatV1 (an item never
// leased and without a group is stored as before groups existed; GroupSeq
// is not stored for an item without a group). Times are Unix nanoseconds. CreatedAt is fixed-width: a current time
// needs 62 bits, 9 bytes as a zig-zag varint, and fixed-width decodes
// faster. The later times are differences from CreatedAt (from 0 when
// CreatedAt is zero), usually 5 to 7 bytes as varints.
func appendMeta(b []byte, m *queue.ItemMeta) ([]byte, error) {
	var flags byte
	if m.Leased {
		flags |= metaLeased
	}
	var created, lease, enqueue, expire, dead int64
	var err error
	if !m.CreatedAt.IsZero() {
		flags |= metaCreatedAt
		if created, err = nanos(m.CreatedAt); err != nil {
			return b, err
		}
	}
	if !m.LeaseDeadline.IsZero() {
		flags |= metaLeaseDeadline
		if lease, err = nanos(m.LeaseDeadline); err != nil {
			return b, err
		}
	}
	if !m.EnqueueAt.IsZero() {
		flags |= metaEnqueueAt
		if enqueue, err = nanos(m.EnqueueAt); err != nil {
			return b, err
		}
	}
	if !m.ExpireDeadline.IsZero() {
		flags |= metaExpireDeadline
		if expire, err = nanos(m.ExpireDeadline); err != nil {
			return b, err
		}
	}
	if m.SourceKey != "" {
		flags |= metaSourceKey
	}
	if m.Fingerprint != "" {
		flags |= metaFingerprint
	}
	if m.DeadReason != "" || !m.DeadAt.IsZero() {
		flags |= metaDead
		if !m.DeadAt.IsZero() {
			if dead, err = nanos(m.DeadAt); err != nil {
				return b, err
			}
		}
	}
	var first int64
	format := byte(formatV1)
	switch {
	case !m.FirstLeasedAt.IsZero():
		// A lease sets FirstLeasedAt: a holder comes with it (one
		// without is not stored).
		format = formatMetaV3
		if !m.Holder.IsZero() {
			format = formatMetaV4
		}
		if first, err = nanos(m.FirstLeasedAt); err != nil {
			return b, err
		}
	case m.Group != "":
		format = formatMetaV2
	}
	b = append(b, format, flags)
	b = binary.AppendVarint(b, int64(m.ID-m.BodyID))
	b = binary.AppendVarint(b, int64(m.Attempts))
	if flags&metaCreatedAt != 0 {
		b = binary.LittleEndian.AppendUint64(b, uint64(created))
	}
	if flags&metaLeaseDeadline != 0 {
		b = binary.AppendVarint(b, delta(lease, created))
	}
	if flags&metaEnqueueAt != 0 {
		b = binary.AppendVarint(b, delta(enqueue, created))
	}
	if flags&metaExpireDeadline != 0 {
		b = binary.AppendVarint(b, delta(expire, created))
	}
	if flags&metaSourceKey != 0 {
		b = appendString(b, m.SourceKey)
	}
	if flags&metaDead != 0 {
		b = appendString(b, m.DeadReason)
		if m.DeadAt.IsZero() {
			b = append(b, timeZero)
		} else {
			b = append(b, timeSet)
			b = binary.AppendVarint(b, delta(dead, created))
		}
	}
	if flags&metaFingerprint != 0 {
		b = appendString(b, m.Fingerprint)
	}
	switch format {
	case formatMetaV2:
		b = appendString(b, m.Group)
		b = binary.AppendVarint(b, int64(m.BodyID-m.GroupSeq))
	case formatMetaV3, formatMetaV4:
		b = appendString(b, m.Group)
		if m.Group != "" {
			b = binary.AppendVarint(b, int64(m.BodyID-m.GroupSeq))
		}
		b = binary.AppendVarint(b, delta(first, created))
		if format == formatMetaV4 {
			b = appendString(b, m.Holder.ClientID)
			b = appendString(b, m.Holder.KeyName)
		}
	}
	return b, nil
}

// delta returns t-base with wrap-around, so that undelta is exact for any
// two int64s.
func delta(t, base int64) int64 { return int64(uint64(t) - uint64(base)) }

func undelta(d, base int64) int64 { return int64(uint64(base) + uint64(d)) }

// decodeMeta decodes a value written by appendMeta into m, whose ID the
// caller sets from the key.
func decodeMeta(v []byte, id uint64, m *queue.ItemMeta) error {
	d := decoder{b: v}
	f := d.byte()
	if f != formatV1 && f != formatMetaV2 && f != formatMetaV3 && f != formatMetaV4 && d.err == nil {
		return fmt.Errorf("meta: unknown format %d", f)
	}
	flags := d.byte()
	if flags&^metaAllFlags != 0 && d.err == nil {
		return fmt.Errorf("meta: unknown flags %#x", flags)
	}
	*m = queue.ItemMeta{
		ID:       id,
		BodyID:   id - uint64(d.varint()),
		Attempts: d.int32(),
		Leased:   flags&metaLeased != 0,
	}
	var created int64
	if flags&metaCreatedAt != 0 {
		created = int64(d.uint64())
		m.CreatedAt = time.Unix(0, created)
	}
	if flags&metaLeaseDeadline != 0 {
		m.LeaseDeadline = time.Unix(0, undelta(d.varint(), created))
	}
	if flags&metaEnqueueAt != 0 {
		m.EnqueueAt = time.Unix(0, undelta(d.varint(), created))
	}
	if flags&metaExpireDeadline != 0 {
		m.ExpireDeadline = time.Unix(0, undelta(d.varint(), created))
	}
	if flags&metaSourceKey != 0 {
		m.SourceKey = d.string()
	}
	if flags&metaDead != 0 {
		m.DeadReason = d.string()
		switch d.byte() {
		case timeZero:
		case timeSet:
			m.DeadAt = time.Unix(0, undelta(d.varint(), created))
		default:
			d.fail()
		}
	}
	if flags&metaFingerprint != 0 {
		m.Fingerprint = d.string()
	}
	switch f {
	case formatMetaV2:
		m.Group = d.string()
		m.GroupSeq = m.BodyID - uint64(d.varint())
	case formatMetaV3, formatMetaV4:
		if m.Group = d.string(); m.Group != "" {
			m.GroupSeq = m.BodyID - uint64(d.varint())
		}
		m.FirstLeasedAt = time.Unix(0, undelta(d.varint(), created))
		if f == formatMetaV4 {
			m.Holder.ClientID = d.string()
			m.Holder.KeyName = d.string()
		}
	}
	return d.finish("meta")
}

// appendBody appends:
//
//	format byte (formatV1, or formatBodyV2 when Attributes is not empty),
//	strings Reference, Kind, Encoding, Payload, SourceQueue, SourceID,
//	DeadReason (uvarint length + bytes each),
//	time DeadAt, varint RedriveCount,
//	formatBodyV2 only: bytes Attributes.
func appendBody(b []byte, body *queue.ItemBody) ([]byte, error) {
	format := byte(formatV1)
	if len(body.Attributes) > 0 {
		format = formatBodyV2
	}
	b = append(b, format)
	b = appendString(b, body.Reference)
	b = appendString(b, body.Kind)
	b = appendString(b, body.Encoding)
	b = appendBytes(b, body.Payload)
	b = appendString(b, body.SourceQueue)
	b = appendString(b, body.SourceID)
	b = appendString(b, body.DeadReason)
	b, err := appendTime(b, body.DeadAt)
	if err != nil {
		return b, err
	}
	b = binary.AppendVarint(b, int64(body.RedriveCount))
	if format == formatBodyV2 {
		b = appendBytes(b, body.Attributes)
	}
	return b, nil
}

// decodeBody decodes a value written by appendBody. The payload is copied;
// an empty one decodes as nil.
func decodeBody(v []byte) (queue.ItemBody, error) {
	d := decoder{b: v}
	f := d.byte()
	if f != formatV1 && f != formatBodyV2 && d.err == nil {
		return queue.ItemBody{}, fmt.Errorf("body: unknown format %d", f)
	}
	body := queue.ItemBody{
		Reference:    d.string(),
		Kind:         d.string(),
		Encoding:     d.string(),
		Payload:      d.bytes(),
		SourceQueue:  d.string(),
		SourceID:     d.string(),
		DeadReason:   d.string(),
		DeadAt:       d.time(),
		RedriveCount: d.int32(),
	}
	if f == formatBodyV2 {
		body.Attributes = d.bytes()
	}
	if err := d.finish("body"); err != nil {
		return queue.ItemBody{}, err
	}
	return body, nil
}

// appendErrors appends:
//
//	format byte (formatV1, or formatErrorsV2 when DeadLetter is not empty),
//	string LastError, uvarint count, count × (varint Attempt, string Error,
//	time At); with formatErrorsV2 the DeadLetter entries follow the same
//	way (uvarint count, count × entry).
func appendErrors(b []byte, e *queue.ItemErrors) ([]byte, error) {
	format := byte(formatV1)
	if len(e.DeadLetter) > 0 {
		format = formatErrorsV2
	}
	b = append(b, format)
	b = appendString(b, e.LastError)
	b, err := appendAttemptErrors(b, e.Errors)
	if err != nil || format == formatV1 {
		return b, err
	}
	return appendAttemptErrors(b, e.DeadLetter)
}

// appendAttemptErrors appends uvarint len(es), then each entry as varint
// Attempt, string Error, time At.
func appendAttemptErrors(b []byte, es []queue.AttemptError) ([]byte, error) {
	b = binary.AppendUvarint(b, uint64(len(es)))
	var err error
	for i := range es {
		a := &es[i]
		b = binary.AppendVarint(b, int64(a.Attempt))
		b = appendString(b, a.Error)
		if b, err = appendTime(b, a.At); err != nil {
			return b, err
		}
	}
	return b, nil
}

// decodeErrors decodes a value written by appendErrors. No errors decode as
// a nil slice.
func decodeErrors(v []byte) (queue.ItemErrors, error) {
	d := decoder{b: v}
	f := d.byte()
	if f != formatV1 && f != formatErrorsV2 && d.err == nil {
		return queue.ItemErrors{}, fmt.Errorf("errors: unknown format %d", f)
	}
	e := queue.ItemErrors{LastError: d.string()}
	e.Errors = d.attemptErrors()
	if f == formatErrorsV2 {
		e.DeadLetter = d.attemptErrors()
	}
	if err := d.finish("errors"); err != nil {
		return queue.ItemErrors{}, err
	}
	return e, nil
}

// attemptErrors decodes what appendAttemptErrors wrote: nil for none.
func (d *decoder) attemptErrors() []queue.AttemptError {
	n := d.uvarint()
	// Each entry takes at least 3 bytes: a corrupt count cannot make us
	// allocate more than the value's size.
	if n > uint64(len(d.b))/3 {
		d.fail()
	}
	if n == 0 || d.err != nil {
		return nil
	}
	out := make([]queue.AttemptError, n)
	for i := range out {
		out[i] = queue.AttemptError{Attempt: d.int32(), Error: d.string(), At: d.time()}
	}
	return out
}

// appendQueueInfo appends the queue's catalog entry (its name is the key):
//
//	format byte (formatInfoV2), uvarint ID, strings DeadQueue, Reference,
//	varints LeaseTimeout, ExpireTimeout (nanoseconds), MaxAttempts,
//	Partitions, times CreatedAt, UpdatedAt, string Namespace,
//	formatInfoV3 to V5: string Attributes,
//	formatInfoV4 and V5: varint DeduplicationWindow (nanoseconds),
//	formatInfoV5 and V6: byte Ordered (0 or 1), string GroupDeadPolicy,
//	formatInfoV6 only: time PausedAt (zero: running).
//
// Entries written before namespaces have format formatV1 and end after
// UpdatedAt; they decode with queue.DefaultNamespace. An entry is written
// in the oldest format that holds it: formatInfoV2 without Attributes,
// DeduplicationWindow, Ordered and GroupDeadPolicy, formatInfoV3 with
// Attributes only, formatInfoV4 without Ordered and GroupDeadPolicy,
// formatInfoV5 without PausedAt.
func appendQueueInfo(b []byte, q *queue.QueueInfo) ([]byte, error) {
	format := byte(formatInfoV2)
	switch {
	case q.Paused():
		format = formatInfoV6
	case q.Ordered || q.GroupDeadPolicy != "":
		format = formatInfoV5
	case q.DeduplicationWindow != 0:
		format = formatInfoV4
	case q.Attributes != "":
		format = formatInfoV3
	}
	b = append(b, format)
	b = binary.AppendUvarint(b, q.ID)
	b = appendString(b, q.DeadQueue)
	b = appendString(b, q.Reference)
	b = binary.AppendVarint(b, int64(q.LeaseTimeout))
	b = binary.AppendVarint(b, int64(q.ExpireTimeout))
	b = binary.AppendVarint(b, int64(q.MaxAttempts))
	b = binary.AppendVarint(b, int64(q.Partitions))
	b, err := appendTime(b, q.CreatedAt)
	if err != nil {
		return b, err
	}
	if b, err = appendTime(b, q.UpdatedAt); err != nil {
		return b, err
	}
	b = appendString(b, q.Namespace)
	if format >= formatInfoV3 {
		b = appendString(b, q.Attributes)
	}
	if format >= formatInfoV4 {
		b = binary.AppendVarint(b, int64(q.DeduplicationWindow))
	}
	if format >= formatInfoV5 {
		ordered := byte(0)
		if q.Ordered {
			ordered = 1
		}
		b = append(b, ordered)
		b = appendString(b, q.GroupDeadPolicy)
	}
	if format == formatInfoV6 {
		return appendTime(b, q.PausedAt)
	}
	return b, nil
}

// decodeQueueInfo decodes a value written by appendQueueInfo.
func decodeQueueInfo(name string, v []byte) (queue.QueueInfo, error) {
	d := decoder{b: v}
	f := d.byte()
	if (f < formatV1 || f > formatInfoV6) && d.err == nil {
		return queue.QueueInfo{}, fmt.Errorf("queue info: unknown format %d", f)
	}
	q := queue.QueueInfo{
		ID:            d.uvarint(),
		Name:          name,
		DeadQueue:     d.string(),
		Reference:     d.string(),
		LeaseTimeout:  time.Duration(d.varint()),
		ExpireTimeout: time.Duration(d.varint()),
		MaxAttempts:   d.int32(),
		Partitions:    d.int32(),
		CreatedAt:     d.time(),
		UpdatedAt:     d.time(),
		Namespace:     queue.DefaultNamespace,
	}
	if f >= formatInfoV2 {
		q.Namespace = d.string()
	}
	if f >= formatInfoV3 {
		q.Attributes = d.string()
	}
	if f >= formatInfoV4 {
		q.DeduplicationWindow = time.Duration(d.varint())
	}
	if f >= formatInfoV5 {
		switch d.byte() {
		case 0:
		case 1:
			q.Ordered = true
		default:
			d.fail()
		}
		q.GroupDeadPolicy = d.string()
	}
	if f == formatInfoV6 {
		q.PausedAt = d.time()
	}
	if err := d.finish("queue info"); err != nil {
		return queue.QueueInfo{}, err
	}
	return q, nil
}

// appendHeld appends a held group's record (its partition and group are
// in the key):
//
//	format byte (formatV1), string DeadKey, string DeadQueue, uvarint Seq, varint HeldAt
//	(Unix nanoseconds).
func appendHeld(b []byte, h *queue.HeldGroup) []byte {
	b = append(b, formatV1)
	b = appendString(b, h.DeadKey)
	b = appendString(b, h.DeadQueue)
	b = binary.AppendUvarint(b, h.Seq)
	return binary.AppendVarint(b, h.HeldAt)
}

// decodeHeld decodes a value written by appendHeld into a HeldGroup of
// partition and group.
func decodeHeld(partition int32, group string, v []byte) (queue.HeldGroup, error) {
	d := decoder{b: v}
	if f := d.byte(); f != formatV1 && d.err == nil {
		return queue.HeldGroup{}, fmt.Errorf("held group: unknown format %d", f)
	}
	h := queue.HeldGroup{Partition: partition, Group: group, DeadKey: d.string(), DeadQueue: d.string(), Seq: d.uvarint(), HeldAt: d.varint()}
	if err := d.finish("held group"); err != nil {
		return queue.HeldGroup{}, err
	}
	return h, nil
}

// appendTask appends a task record (its ID is the key):
//
//	format byte, string Queue, bytes Data (uvarint length + bytes each).
func appendTask(b []byte, t *store.TaskRecord) []byte {
	b = append(b, formatV1)
	b = appendString(b, t.Queue)
	return appendBytes(b, t.Data)
}

// decodeTask decodes a value written by appendTask. Data is copied; empty
// Data decodes as nil.
func decodeTask(id string, v []byte) (store.TaskRecord, error) {
	d := decoder{b: v}
	if f := d.byte(); f != formatV1 && d.err == nil {
		return store.TaskRecord{}, fmt.Errorf("task: unknown format %d", f)
	}
	t := store.TaskRecord{ID: id, Queue: d.string(), Data: d.bytes()}
	if err := d.finish("task"); err != nil {
		return store.TaskRecord{}, err
	}
	return t, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// appendTime appends a time tag, then the Unix nanoseconds for a non-zero
// time.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	if t.IsZero() {
		return append(b, timeZero), nil
	}
	n, err := nanos(t)
	if err != nil {
		return b, err
	}
	b = append(b, timeSet)
	return binary.AppendVarint(b, n), nil
}

// errCorrupt reports a value that does not decode.
var errCorrupt = errors.New("corrupt value")

// decoder reads an encoded value. The first failure sticks: later reads
// return zero values, and finish reports it.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errCorrupt
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// uint64 reads 8 bytes, little-endian.
func (d *decoder) uint64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) int32() int32 {
	v := d.varint()
	if int64(int32(v)) != v {
		d.fail()
		return 0
	}
	return int32(v)
}

// raw returns the next length-prefixed bytes, aliasing the input.
func (d *decoder) raw() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) string() string { return string(d.raw()) }

// bytes returns a copy of the next length-prefixed bytes; nil when empty.
func (d *decoder) bytes() []byte {
	p := d.raw()
	if len(p) == 0 {
		return nil
	}
	return append([]byte(nil), p...)
}

func (d *decoder) time() time.Time {
	switch d.byte() {
	case timeZero:
		return time.Time{}
	case timeSet:
		return time.Unix(0, d.varint())
	}
	d.fail()
	return time.Time{}
}

// finish reports a decoding failure or trailing bytes, naming what was
// decoded.
func (d *decoder) finish(what string) error {
	if d.err != nil {
		return fmt.Errorf("%s: %w", what, d.err)
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%s: %w: %d trailing bytes", what, errCorrupt, len(d.b))
	}
	return nil
}
