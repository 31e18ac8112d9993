package pebble

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/styxq/styx/internal/store"
)

// Activity records (store.ActivityStore, 0x17; issue 49): 0x17 id (8-byte
// BE) → the record. IDs grow with every record, so the range in key order
// is the log oldest first; ListActivity reads it backwards.

// activityFormat is the first byte of an activity record's value (see
// appendActivity).
const activityFormat byte = 1

// activityKey is the key of the activity record with the given ID.
func activityKey(id uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixActivity
	binary.BigEndian.PutUint64(k[1:], id)
	return k
}

// appendActivity encodes r but its ID (the key's): the format byte, a
// varint At (Unix nanoseconds), length-prefixed Key, Door, Action, Op and
// Queue, a uvarint count of details and each detail's length-prefixed name
// and value.
func appendActivity(b []byte, r *store.ActivityRecord) []byte {
	b = append(b, activityFormat)
	b = binary.AppendVarint(b, r.At.UnixNano())
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, s := range []string{r.Key, r.Door, r.Action, r.Op, r.Queue} {
		str(s)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Details)))
	for _, d := range r.Details {
		str(d.Name)
		str(d.Value)
	}
	return b
}

// decodeActivity decodes a value of appendActivity.
func decodeActivity(id uint64, v []byte) (store.ActivityRecord, error) {
	r := store.ActivityRecord{ID: id}
	if len(v) == 0 || v[0] != activityFormat {
		return r, fmt.Errorf("%w: activity %d: unknown format", errCorrupt, id)
	}
	v = v[1:]
	at, n := binary.Varint(v)
	if n <= 0 {
		return r, fmt.Errorf("%w: activity %d: truncated time", errCorrupt, id)
	}
	v = v[n:]
	r.At = time.Unix(0, at)
	bad := false
	str := func() string {
		l, n := binary.Uvarint(v)
		if n <= 0 || l > uint64(len(v)-n) {
			bad = true
			return ""
		}
		s := string(v[n : n+int(l)])
		v = v[n+int(l):]
		return s
	}
	r.Key, r.Door, r.Action, r.Op, r.Queue = str(), str(), str(), str(), str()
	count, n := binary.Uvarint(v)
	if bad || n <= 0 || count > uint64(len(v)) {
		return r, fmt.Errorf("%w: activity %d: truncated", errCorrupt, id)
	}
	v = v[n:]
	for range count {
		d := store.ActivityDetail{Name: str(), Value: str()}
		if bad {
			return r, fmt.Errorf("%w: activity %d: truncated detail", errCorrupt, id)
		}
		r.Details = append(r.Details, d)
	}
	return r, nil
}

// PutActivity implements store.ActivityStore: one synced write, whatever
// Config.NoSync says (as task records). The ID is the greater of the last
// ID plus one and At in Unix nanoseconds, so IDs keep growing across
// restarts and prunes.
func (s *Store) PutActivity(ctx context.Context, r store.ActivityRecord) (uint64, error) {
	id, err := s.putActivity(ctx, r)
	if err != nil {
		return 0, fmt.Errorf("pebble: put activity: %w", err)
	}
	return id, nil
}

func (s *Store) putActivity(ctx context.Context, r store.ActivityRecord) (uint64, error) {
	if err := s.enterWrite(ctx); err != nil {
		return 0, err
	}
	defer s.exit()
	s.activityMu.Lock()
	defer s.activityMu.Unlock()
	if !s.activityLoaded {
		last, err := s.lastActivityID(ctx)
		if err != nil {
			return 0, err
		}
		s.lastActivity, s.activityLoaded = last, true
	}
	id := max(s.lastActivity+1, uint64(max(r.At.UnixNano(), 0)))
	if err := s.commit(func() error { return s.db.Set(activityKey(id), appendActivity(nil, &r), pebbledb.Sync) }); err != nil {
		return 0, err
	}
	s.lastActivity = id
	return id, nil
}

// lastActivityID returns the highest ID in the 0x17 range, 0 when empty.
func (s *Store) lastActivityID(ctx context.Context) (uint64, error) {
	iter, err := s.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: []byte{prefixActivity}, UpperBound: []byte{prefixActivity + 1}})
	if err != nil {
		return 0, err
	}
	defer iter.Close()
	if !iter.Last() {
		return 0, iter.Error()
	}
	if len(iter.Key()) != 9 {
		return 0, fmt.Errorf("%w: activity key of %d bytes", errCorrupt, len(iter.Key()))
	}
	return binary.BigEndian.Uint64(iter.Key()[1:]), nil
}

// ListActivity implements store.ActivityStore: the 0x17 range read
// backwards from p.Before, the records of other queues skipped (the range
// is bounded by PruneActivity's keep).
func (s *Store) ListActivity(ctx context.Context, p store.ActivityListParams) ([]store.ActivityRecord, error) {
	out, err := s.listActivity(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("pebble: list activity: %w", err)
	}
	return out, nil
}

func (s *Store) listActivity(ctx context.Context, p store.ActivityListParams) ([]store.ActivityRecord, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("limit %d: want > 0", p.Limit)
	}
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	upper := []byte{prefixActivity + 1}
	if p.Before != 0 {
		upper = activityKey(p.Before)
	}
	iter, err := s.db.NewIterWithContext(ctx, &pebbledb.IterOptions{LowerBound: []byte{prefixActivity}, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	var out []store.ActivityRecord
	for valid := iter.Last(); valid && len(out) < p.Limit; valid = iter.Prev() {
		k := iter.Key()
		if len(k) != 9 {
			return nil, fmt.Errorf("%w: activity key of %d bytes", errCorrupt, len(k))
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			return nil, err
		}
		r, err := decodeActivity(binary.BigEndian.Uint64(k[1:]), v)
		if err != nil {
			return nil, err
		}
		if p.Queue == "" || r.Queue == p.Queue {
			out = append(out, r)
		}
	}
	return out, iter.Error()
}

// PruneActivity implements store.ActivityStore: one range deletion, from
// the start of the 0x17 range to the first record kept (the keep-th newest,
// or the oldest whose At is not before before, whichever is newer);
// synced.
func (s *Store) PruneActivity(ctx context.Context, before time.Time, keep int) error {
	if err := s.pruneActivity(ctx, before, keep); err != nil {
		return fmt.Errorf("pebble: prune activity: %w", err)
	}
	return nil
}

func (s *Store) pruneActivity(ctx context.Context, before time.Time, keep int) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	iter, err := s.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: []byte{prefixActivity}, UpperBound: []byte{prefixActivity + 1}})
	if err != nil {
		return err
	}
	var first, cut []byte // the first key, and the first key kept
	// By age: records are in ID order, which is their order of writing;
	// the first one young enough ends the scan.
	for valid := iter.First(); valid; valid = iter.Next() {
		if first == nil {
			first = append([]byte(nil), iter.Key()...)
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			_ = iter.Close()
			return err
		}
		if len(v) < 2 || v[0] != activityFormat {
			_ = iter.Close()
			return fmt.Errorf("%w: activity value of %d bytes", errCorrupt, len(v))
		}
		at, n := binary.Varint(v[1:])
		if n <= 0 {
			_ = iter.Close()
			return fmt.Errorf("%w: activity: truncated time", errCorrupt)
		}
		if !time.Unix(0, at).Before(before) {
			cut = append([]byte(nil), iter.Key()...)
			break
		}
	}
	if first == nil {
		return iter.Close() // no record
	}
	if cut == nil {
		cut = []byte{prefixActivity + 1} // every record is too old
	}
	// By count: the keep-th newest.
	if keep > 0 {
		n := 0
		for valid := iter.Last(); valid; valid = iter.Prev() {
			if n++; n == keep {
				if k := iter.Key(); string(k) > string(cut) {
					cut = append(cut[:0:0], k...)
				}
				break
			}
		}
	}
	if err := iter.Close(); err != nil {
		return err
	}
	if string(cut) <= string(first) {
		return nil // nothing to delete
	}
	return s.commit(func() error { return s.db.DeleteRange([]byte{prefixActivity}, cut, pebbledb.Sync) })
}
