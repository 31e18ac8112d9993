package pebble

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)

func sampleMetas() []queue.ItemMeta {
	return []queue.ItemMeta{
		{},
		{ID: 1, BodyID: 1, CreatedAt: t0, ExpireDeadline: t0.Add(24 * time.Hour)},
		{ID: 9, BodyID: 2, Attempts: 3, Leased: true, LeaseDeadline: t0.Add(time.Minute), EnqueueAt: t0.Add(-time.Hour), ExpireDeadline: t0.Add(time.Hour), CreatedAt: t0, SourceKey: "src~1"},
		{ID: 2, BodyID: math.MaxUint64, Attempts: math.MinInt32, LeaseDeadline: time.Unix(0, math.MaxInt64)},
		{ID: math.MaxUint64, BodyID: 0, Attempts: math.MaxInt32, CreatedAt: time.Unix(0, math.MaxInt64), EnqueueAt: time.Unix(0, math.MinInt64), ExpireDeadline: time.Unix(0, 1)},
		{ID: 5, BodyID: 5, LeaseDeadline: t0, Leased: true}, // no CreatedAt
		{ID: 6, BodyID: 6, CreatedAt: t0, DeadReason: "expired", DeadAt: t0.Add(time.Hour)},
		{ID: 7, BodyID: 7, DeadReason: "explicit"},
		{ID: 8, BodyID: 8, CreatedAt: t0, DeadAt: time.Unix(0, math.MinInt64)},
		{ID: 10, BodyID: 10, CreatedAt: t0, DeadAt: t0, SourceKey: "explicit:q~1", Fingerprint: "0123456789abcdef"},
		{ID: 11, BodyID: 11, CreatedAt: t0, Group: "order-7", GroupSeq: 11},
		{ID: 30, BodyID: 12, Leased: true, LeaseDeadline: t0, CreatedAt: t0, SourceKey: "redrive:dlq~1", Group: "g", GroupSeq: 3},
		{ID: 13, BodyID: 13, Group: strings.Repeat("x", queue.MaxGroup), GroupSeq: math.MaxUint64},
		{ID: 40, BodyID: 14, Attempts: 2, Leased: true, LeaseDeadline: t0.Add(time.Hour), CreatedAt: t0, FirstLeasedAt: t0.Add(time.Second)},
		{ID: 41, BodyID: 15, Attempts: 1, CreatedAt: t0, FirstLeasedAt: t0.Add(time.Minute), Group: "g", GroupSeq: 2},
		{ID: 16, BodyID: 16, FirstLeasedAt: time.Unix(0, math.MinInt64)}, // no CreatedAt
		{ID: 17, BodyID: 17, CreatedAt: time.Unix(0, math.MaxInt64), FirstLeasedAt: time.Unix(0, math.MinInt64), SourceKey: "max_attempts:q~3"},
	}
}

func sameMeta(t *testing.T, want, got queue.ItemMeta) {
	t.Helper()
	for _, p := range []struct {
		name string
		w, g time.Time
	}{
		{"LeaseDeadline", want.LeaseDeadline, got.LeaseDeadline},
		{"EnqueueAt", want.EnqueueAt, got.EnqueueAt},
		{"ExpireDeadline", want.ExpireDeadline, got.ExpireDeadline},
		{"CreatedAt", want.CreatedAt, got.CreatedAt},
		{"DeadAt", want.DeadAt, got.DeadAt},
		{"FirstLeasedAt", want.FirstLeasedAt, got.FirstLeasedAt},
	} {
		require.True(t, p.w.Equal(p.g), "%s: want %v, got %v", p.name, p.w, p.g)
		require.Equal(t, p.w.IsZero(), p.g.IsZero(), p.name)
	}
	for _, m := range []*queue.ItemMeta{&want, &got} {
		m.LeaseDeadline, m.EnqueueAt, m.ExpireDeadline, m.CreatedAt, m.DeadAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
		m.FirstLeasedAt = time.Time{}
	}
	require.Equal(t, want, got)
}

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range sampleMetas() {
		v, err := appendMeta(nil, &m)
		require.NoError(t, err)
		var got queue.ItemMeta
		require.NoError(t, decodeMeta(v, m.ID, &got))
		sameMeta(t, m, got)
	}
}

func TestMetaSize(t *testing.T) {
	// A ready item as the logical queue writes it on insert.
	m := queue.ItemMeta{ID: 1 << 40, BodyID: 1 << 40, CreatedAt: t0, ExpireDeadline: t0.Add(24 * time.Hour)}
	v, err := appendMeta(nil, &m)
	require.NoError(t, err)
	require.LessOrEqual(t, len(v), 20)
	// Leased, retried and requeued; first leased a second after it came.
	m.ID += 1000
	m.Leased, m.Attempts, m.LeaseDeadline = true, 2, t0.Add(5*time.Minute)
	m.FirstLeasedAt = t0.Add(time.Second)
	v, err = appendMeta(nil, &m)
	require.NoError(t, err)
	require.LessOrEqual(t, len(v), 34)
}

// TestMetaFirstLeased: an item leased once is written in formatMetaV3,
// its FirstLeasedAt (with or without a group) as a difference from
// CreatedAt; an item never leased is written byte for byte as before
// (formatV1, or formatMetaV2 with a group), and such a record, as every
// record written before FirstLeasedAt existed, reads as never leased.
func TestMetaFirstLeased(t *testing.T) {
	for _, group := range []string{"", "customer-42"} {
		m := queue.ItemMeta{ID: 1 << 40, BodyID: 1 << 40, Attempts: 1, Leased: true, CreatedAt: t0,
			LeaseDeadline: t0.Add(time.Minute), ExpireDeadline: t0.Add(24 * time.Hour), Group: group}
		if group != "" {
			m.GroupSeq = m.BodyID
		}
		old, err := appendMeta(nil, &m)
		require.NoError(t, err)
		wantOld := byte(formatV1)
		if group != "" {
			wantOld = formatMetaV2
		}
		require.Equal(t, wantOld, old[0], "a record without FirstLeasedAt keeps its former format")
		var got queue.ItemMeta
		require.NoError(t, decodeMeta(old, m.ID, &got))
		require.True(t, got.FirstLeasedAt.IsZero(), "a former record reads as never leased")
		sameMeta(t, m, got)

		m.FirstLeasedAt = t0.Add(1500 * time.Millisecond)
		v, err := appendMeta(nil, &m)
		require.NoError(t, err)
		require.Equal(t, byte(formatMetaV3), v[0])
		require.Equal(t, old[1:], v[1:len(old)], "the former layout, then FirstLeasedAt")
		require.LessOrEqual(t, len(v), len(old)+6, "FirstLeasedAt costs its difference from CreatedAt (and an empty group's byte)")
		require.NoError(t, decodeMeta(v, m.ID, &got))
		require.True(t, m.FirstLeasedAt.Equal(got.FirstLeasedAt), "want %v, got %v", m.FirstLeasedAt, got.FirstLeasedAt)
		sameMeta(t, m, got)
	}
}

// TestMetaHolder (issue 49, point 4): a lease's state record with its
// holder is written in formatMetaV4, formatMetaV3's layout and then the
// holder's client id and key name; without a holder it stays formatMetaV3.
func TestMetaHolder(t *testing.T) {
	for _, group := range []string{"", "customer-42"} {
		m := queue.ItemMeta{ID: 1 << 40, BodyID: 1<<40 - 7, Attempts: 2, Leased: true, CreatedAt: t0,
			LeaseDeadline: t0.Add(time.Minute), FirstLeasedAt: t0.Add(time.Second), Group: group}
		if group != "" {
			m.GroupSeq = m.BodyID
		}
		v3, err := appendMeta(nil, &m)
		require.NoError(t, err)
		require.Equal(t, byte(formatMetaV3), v3[0])
		m.Holder = queue.Holder{ClientID: "worker-7", KeyName: "ops"}
		v, err := appendMeta(nil, &m)
		require.NoError(t, err)
		require.Equal(t, byte(formatMetaV4), v[0])
		require.Equal(t, v3[1:], v[1:len(v3)], "formatMetaV3's layout, then the holder")
		require.Len(t, v, len(v3)+2+len("worker-7")+len("ops"))
		var got queue.ItemMeta
		require.NoError(t, decodeMeta(v, m.ID, &got))
		sameMeta(t, m, got)
		// A holder with an empty key name (no --auth).
		m.Holder.KeyName = ""
		v, err = appendMeta(nil, &m)
		require.NoError(t, err)
		require.NoError(t, decodeMeta(v, m.ID, &got))
		sameMeta(t, m, got)
	}
}

// TestMetaGroup: an item with a group is written in formatMetaV2; one
// without stays formatV1, byte for byte as before groups existed, and a
// grouped item's meta costs its group and one byte more.
func TestMetaGroup(t *testing.T) {
	m := queue.ItemMeta{ID: 1 << 40, BodyID: 1 << 40, CreatedAt: t0, ExpireDeadline: t0.Add(24 * time.Hour)}
	plain, err := appendMeta(nil, &m)
	require.NoError(t, err)
	require.Equal(t, byte(formatV1), plain[0])
	m.Group, m.GroupSeq = "customer-42", m.BodyID
	grouped, err := appendMeta(nil, &m)
	require.NoError(t, err)
	require.Equal(t, byte(formatMetaV2), grouped[0])
	require.Equal(t, plain[1:], grouped[1:len(plain)], "the V1 layout, then the group")
	require.Len(t, grouped, len(plain)+1+len(m.Group)+1)
	var got queue.ItemMeta
	require.NoError(t, decodeMeta(grouped, m.ID, &got))
	require.Equal(t, m.Group, got.Group)
	require.Equal(t, m.GroupSeq, got.GroupSeq)
	require.NoError(t, decodeMeta(plain, m.ID, &got))
	require.Empty(t, got.Group)
	require.Zero(t, got.GroupSeq)
}

// TestHeldRoundTrip: a held group's record.
func TestHeldRoundTrip(t *testing.T) {
	for _, h := range []queue.HeldGroup{
		{Partition: 3, Group: "g", DeadKey: "explicit:orders~0123456789abc", DeadQueue: "orders-dlq", Seq: 1 << 50, HeldAt: t0.UnixNano()},
		{Group: "x"},
	} {
		got, err := decodeHeld(h.Partition, h.Group, appendHeld(nil, &h))
		require.NoError(t, err)
		require.Equal(t, h, got)
	}
	k := heldKey(7, 3, "g")
	require.Equal(t, append(append([]byte{prefixHeld}, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 3), 'g'), k)
}

func TestTimeOutOfRange(t *testing.T) {
	for _, tm := range []time.Time{
		time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		_, err := appendMeta(nil, &queue.ItemMeta{CreatedAt: tm})
		require.ErrorIs(t, err, errTimeRange)
		_, err = appendMeta(nil, &queue.ItemMeta{CreatedAt: t0, LeaseDeadline: tm})
		require.ErrorIs(t, err, errTimeRange)
		_, err = appendMeta(nil, &queue.ItemMeta{CreatedAt: t0, DeadAt: tm})
		require.ErrorIs(t, err, errTimeRange)
		_, err = appendMeta(nil, &queue.ItemMeta{CreatedAt: t0, FirstLeasedAt: tm})
		require.ErrorIs(t, err, errTimeRange)
		_, err = appendBody(nil, &queue.ItemBody{DeadAt: tm})
		require.ErrorIs(t, err, errTimeRange)
		_, err = appendErrors(nil, &queue.ItemErrors{Errors: []queue.AttemptError{{At: tm}}})
		require.ErrorIs(t, err, errTimeRange)
		_, err = appendQueueInfo(nil, &queue.QueueInfo{UpdatedAt: tm})
		require.ErrorIs(t, err, errTimeRange)
	}
}

// encoded is a valid encoding and its decoder.
type encoded struct {
	name   string
	v      []byte
	decode func([]byte) error
}

// encodings returns valid encodings of every value kind.
func encodings(t testing.TB) []encoded {
	var out []encoded
	for i, m := range sampleMetas() {
		v, err := appendMeta(nil, &m)
		require.NoError(t, err)
		out = append(out, encoded{fmt.Sprint("meta ", i), v, func(v []byte) error {
			var m queue.ItemMeta
			return decodeMeta(v, 1, &m)
		}})
	}
	for i, b := range []queue.ItemBody{
		{Reference: "r", Kind: "k", Encoding: "e", Payload: []byte("payload"), SourceQueue: "q", SourceID: "1", DeadReason: "expired", DeadAt: t0, RedriveCount: 2},
		{},
	} {
		v, err := appendBody(nil, &b)
		require.NoError(t, err)
		out = append(out, encoded{fmt.Sprint("body ", i), v, func(v []byte) error { _, err := decodeBody(v); return err }})
	}
	for i, e := range []queue.ItemErrors{
		{LastError: "x", Errors: []queue.AttemptError{{Attempt: 1, Error: "x", At: t0}, {Attempt: 2}}},
		{LastError: "x"},
		{LastError: "x", Errors: []queue.AttemptError{{Attempt: 1, Error: "x", At: t0}},
			DeadLetter: []queue.AttemptError{{Attempt: 1, Error: "lease expired after 1m0s", At: t0}, {Attempt: 2}}},
	} {
		v, err := appendErrors(nil, &e)
		require.NoError(t, err)
		out = append(out, encoded{fmt.Sprint("errors ", i), v, func(v []byte) error { _, err := decodeErrors(v); return err }})
	}
	v, err := appendQueueInfo(nil, &queue.QueueInfo{ID: 7, DeadQueue: "d", Reference: "r", LeaseTimeout: time.Minute, ExpireTimeout: time.Hour, MaxAttempts: 3, Partitions: 4, CreatedAt: t0, UpdatedAt: t0, Namespace: "team-a"})
	require.NoError(t, err)
	out = append(out, encoded{"info", v, func(v []byte) error { _, err := decodeQueueInfo("q", v); return err }})
	out = append(out, encoded{"info v1", queueInfoV1(t), func(v []byte) error { _, err := decodeQueueInfo("q", v); return err }})
	v, err = appendQueueInfo(nil, &queue.QueueInfo{ID: 7, Partitions: 1, CreatedAt: t0, UpdatedAt: t0, Ordered: true, GroupDeadPolicy: queue.GroupHold})
	require.NoError(t, err)
	out = append(out, encoded{"info v5", v, func(v []byte) error { _, err := decodeQueueInfo("q", v); return err }})
	v, err = appendQueueInfo(nil, &queue.QueueInfo{ID: 7, Partitions: 1, CreatedAt: t0, UpdatedAt: t0, PausedAt: t0})
	require.NoError(t, err)
	out = append(out, encoded{"info v6", v, func(v []byte) error { _, err := decodeQueueInfo("q", v); return err }})
	h := queue.HeldGroup{DeadKey: "explicit:q~1", Seq: 5, HeldAt: t0.UnixNano()}
	out = append(out, encoded{"held", appendHeld(nil, &h), func(v []byte) error { _, err := decodeHeld(0, "g", v); return err }})
	for i, task := range []store.TaskRecord{
		{ID: "t", Queue: "dlq", Data: []byte("redrive state")},
		{ID: "t"},
	} {
		v := appendTask(nil, &task)
		out = append(out, encoded{fmt.Sprint("task ", i), v, func(v []byte) error { _, err := decodeTask("t", v); return err }})
	}
	return out
}

// decodeAll runs every decoder on v, for panics.
func decodeAll(v []byte) {
	var m queue.ItemMeta
	_ = decodeMeta(v, 1, &m)
	_, _ = decodeBody(v)
	_, _ = decodeErrors(v)
	_, _ = decodeQueueInfo("q", v)
	_, _ = decodeTask("t", v)
	_, _ = decodeHeld(0, "g", v)
}

// TestErrorsDeadLetter: a history with DLQ attempts is written as
// formatErrorsV2 and read back whole; one without stays formatV1.
func TestErrorsDeadLetter(t *testing.T) {
	h := queue.ItemErrors{LastError: "card declined", Errors: []queue.AttemptError{{Attempt: 2, Error: "card declined", At: t0}},
		DeadLetter: []queue.AttemptError{{Attempt: 1, Error: "lease expired after 1m0s", At: t0}, {Attempt: 2, At: t0}}}
	v, err := appendErrors(nil, &h)
	require.NoError(t, err)
	require.Equal(t, byte(formatErrorsV2), v[0])
	got, err := decodeErrors(v)
	require.NoError(t, err)
	require.Equal(t, h.LastError, got.LastError)
	texts := func(es []queue.AttemptError) (out []string) {
		for _, e := range es {
			out = append(out, fmt.Sprint(e.Attempt, " ", e.Error, " ", e.At.UnixNano()))
		}
		return out
	}
	require.Equal(t, texts(h.Errors), texts(got.Errors))
	require.Equal(t, texts(h.DeadLetter), texts(got.DeadLetter))
	h.DeadLetter = nil
	v, err = appendErrors(nil, &h)
	require.NoError(t, err)
	require.Equal(t, byte(formatV1), v[0])
}

func TestDecodeCorrupt(t *testing.T) {
	for _, e := range encodings(t) {
		require.NoError(t, e.decode(e.v), e.name)
		decodeAll(e.v)
		for n := range len(e.v) {
			require.ErrorIs(t, e.decode(e.v[:n]), errCorrupt, "%s truncated to %d bytes", e.name, n)
			decodeAll(e.v[:n])
		}
		require.ErrorIs(t, e.decode(append(e.v[:len(e.v):len(e.v)], 0)), errCorrupt, "%s with a trailing byte", e.name)
		require.Error(t, e.decode(append([]byte{9}, e.v[1:]...)), "%s with format 9", e.name)
	}
	var m queue.ItemMeta
	require.Error(t, decodeMeta([]byte{formatV1, 0x80, 0, 0}, 1, &m), "unknown flag")
	require.ErrorIs(t, decodeMeta([]byte{formatV1, metaDead, 0, 0, 0, 7}, 1, &m), errCorrupt, "bad DeadAt tag")
	_, err := decodeErrors([]byte{formatV1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	require.ErrorIs(t, err, errCorrupt, "huge count")
}

func FuzzDecode(f *testing.F) {
	for _, e := range encodings(f) {
		f.Add(e.v)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		decodeAll(v)
	})
}

// queueInfoV1 is a queue info as Styx wrote it before namespaces: format 1,
// no namespace after UpdatedAt.
func queueInfoV1(t testing.TB) []byte {
	b := []byte{formatV1}
	b = binary.AppendUvarint(b, 7)
	b = appendString(b, "d")
	b = appendString(b, "r")
	b = binary.AppendVarint(b, int64(time.Minute))
	b = binary.AppendVarint(b, int64(time.Hour))
	b = binary.AppendVarint(b, 3)
	b = binary.AppendVarint(b, 4)
	b, err := appendTime(b, t0)
	require.NoError(t, err)
	b, err = appendTime(b, t0)
	require.NoError(t, err)
	return b
}

func TestQueueInfoRoundTrip(t *testing.T) {
	in := queue.QueueInfo{ID: 7, Name: "q", DeadQueue: "d", Reference: "r", LeaseTimeout: time.Minute, ExpireTimeout: time.Hour,
		MaxAttempts: 3, Partitions: 4, CreatedAt: t0, UpdatedAt: t0, Namespace: "team-a"}
	v, err := appendQueueInfo(nil, &in)
	require.NoError(t, err)
	got, err := decodeQueueInfo("q", v)
	require.NoError(t, err)
	require.Equal(t, in.Namespace, got.Namespace)
	require.True(t, got.CreatedAt.Equal(in.CreatedAt))
	got.CreatedAt, got.UpdatedAt, in.CreatedAt, in.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	require.Equal(t, in, got)

	// Ordered and GroupDeadPolicy: format 5; without them the older
	// formats, as before.
	require.Equal(t, byte(formatInfoV2), v[0])
	in.Ordered, in.GroupDeadPolicy, in.DeduplicationWindow, in.Attributes = true, queue.GroupHold, time.Hour, "{}"
	v, err = appendQueueInfo(nil, &in)
	require.NoError(t, err)
	require.Equal(t, byte(formatInfoV5), v[0])
	got, err = decodeQueueInfo("q", v)
	require.NoError(t, err)
	got.CreatedAt, got.UpdatedAt = time.Time{}, time.Time{}
	require.Equal(t, in, got)
	in.Ordered, in.GroupDeadPolicy = false, ""
	v, err = appendQueueInfo(nil, &in)
	require.NoError(t, err)
	require.Equal(t, byte(formatInfoV4), v[0])

	// A paused queue (issue 49): format 6, PausedAt kept; resumed, the
	// older formats again.
	in.Ordered, in.GroupDeadPolicy, in.PausedAt = true, queue.GroupHold, t0
	v, err = appendQueueInfo(nil, &in)
	require.NoError(t, err)
	require.Equal(t, byte(formatInfoV6), v[0])
	got, err = decodeQueueInfo("q", v)
	require.NoError(t, err)
	require.True(t, got.Paused())
	require.True(t, got.PausedAt.Equal(t0))
	got.CreatedAt, got.UpdatedAt, got.PausedAt = time.Time{}, time.Time{}, t0
	require.Equal(t, in, got)
	in.PausedAt = time.Time{}
	v, err = appendQueueInfo(nil, &in)
	require.NoError(t, err)
	require.Equal(t, byte(formatInfoV5), v[0])

	// An entry written before namespaces reads as the default namespace.
	old, err := decodeQueueInfo("q", queueInfoV1(t))
	require.NoError(t, err)
	require.Equal(t, queue.DefaultNamespace, old.Namespace)
	require.Equal(t, uint64(7), old.ID)
	require.Equal(t, int32(4), old.Partitions)
	require.True(t, old.UpdatedAt.Equal(t0))
}

func TestTaskRoundTrip(t *testing.T) {
	for _, task := range []store.TaskRecord{
		{ID: "redrive-1", Queue: "orders-dead", Data: []byte{0, 1, 2, 0xff}},
		{ID: "x", Data: make([]byte, 1000)},
		{ID: "y"},
	} {
		v := appendTask(nil, &task)
		require.LessOrEqual(t, len(v), 1+1+len(task.Queue)+2+len(task.Data))
		got, err := decodeTask(task.ID, v)
		require.NoError(t, err)
		require.Equal(t, task, got)
		v[len(v)-1] ^= 0xff // the decoded Data is a copy
		require.Equal(t, task, got)
	}
}

func TestPrefixEnd(t *testing.T) {
	require.Equal(t, []byte{1, 3}, prefixEnd([]byte{1, 2}))
	require.Equal(t, []byte{2}, prefixEnd([]byte{1, 0xff, 0xff}))
	require.Nil(t, prefixEnd([]byte{0xff}))
}

func BenchmarkDecodeMeta(b *testing.B) {
	m := queue.ItemMeta{ID: 1 << 30, BodyID: 1 << 30, Leased: true, Attempts: 2, CreatedAt: t0, LeaseDeadline: t0.Add(time.Minute), ExpireDeadline: t0.Add(24 * time.Hour)}
	v, err := appendMeta(nil, &m)
	if err != nil {
		b.Fatal(err)
	}
	var got queue.ItemMeta
	for b.Loop() {
		if err := decodeMeta(v, m.ID, &got); err != nil {
			b.Fatal(err)
		}
	}
}
