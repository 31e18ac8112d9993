package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/styxq/styx/internal/store"
)

// historyFormat is the first byte of a history record's value (see
// appendHistory).
const historyFormat byte = 1

// maxHistoryNode is the longest node id accepted, in bytes
// (store.HistoryMinute.Node).
const maxHistoryNode = 64

// historyKeyLen is the length of a history key without its node id:
// prefix, queue ID, minute (Unix seconds, 8-byte BE).
const historyKeyLen = queueKeyLen + 8

// historyKey is the key of a queue's record of a minute by one node.
func historyKey(queueID uint64, at time.Time, node string) []byte {
	k := make([]byte, historyKeyLen, historyKeyLen+len(node))
	copy(k, queueKey(prefixHistory, queueID))
	binary.BigEndian.PutUint64(k[queueKeyLen:], uint64(at.Unix()))
	return append(k, node...)
}

// appendHistory encodes m's counts: the format byte, uvarints produced,
// completed and dead-lettered, a varint depth, a uvarint count of groups,
// then per group (in fingerprint order) a length-prefixed fingerprint and
// a uvarint count; then, when m has group patterns, a uvarint count of
// patterns and per pattern (in fingerprint order) a length-prefixed
// fingerprint and a length-prefixed pattern. The patterns are a trailing
// section within format 1: a reader from before them stops at the groups,
// and a record without them ends there.
func appendHistory(b []byte, m *store.HistoryMinute) []byte {
	b = append(b, historyFormat)
	b = binary.AppendUvarint(b, uint64(max(m.Produced, 0)))
	b = binary.AppendUvarint(b, uint64(max(m.Completed, 0)))
	b = binary.AppendUvarint(b, uint64(max(m.DeadLettered, 0)))
	b = binary.AppendVarint(b, m.Depth)
	fps := make([]string, 0, len(m.DeadByGroup))
	for fp := range m.DeadByGroup {
		fps = append(fps, fp)
	}
	sort.Strings(fps)
	b = binary.AppendUvarint(b, uint64(len(fps)))
	for _, fp := range fps {
		b = binary.AppendUvarint(b, uint64(len(fp)))
		b = append(b, fp...)
		b = binary.AppendUvarint(b, uint64(max(m.DeadByGroup[fp], 0)))
	}
	if len(m.GroupPatterns) == 0 {
		return b
	}
	fps = fps[:0]
	for fp := range m.GroupPatterns {
		fps = append(fps, fp)
	}
	sort.Strings(fps)
	b = binary.AppendUvarint(b, uint64(len(fps)))
	for _, fp := range fps {
		for _, s := range []string{fp, m.GroupPatterns[fp]} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
	}
	return b
}

// decodeHistory decodes a value of appendHistory into m's counts.
func decodeHistory(v []byte, m *store.HistoryMinute) error {
	if len(v) == 0 || v[0] != historyFormat {
		return fmt.Errorf("%w: history: unknown format", errCorrupt)
	}
	v = v[1:]
	uv := func() (uint64, bool) {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			return 0, false
		}
		v = v[n:]
		return x, true
	}
	var ok [4]bool
	var p, c, d uint64
	p, ok[0] = uv()
	c, ok[1] = uv()
	d, ok[2] = uv()
	depth, n := binary.Varint(v)
	ok[3] = n > 0
	if ok != [4]bool{true, true, true, true} {
		return fmt.Errorf("%w: history: truncated counts", errCorrupt)
	}
	v = v[n:]
	m.Produced, m.Completed, m.DeadLettered, m.Depth = int64(p), int64(c), int64(d), depth
	groups, good := uv()
	if !good || groups > uint64(len(v)) {
		return fmt.Errorf("%w: history: truncated groups", errCorrupt)
	}
	for range groups {
		l, good := uv()
		if !good || l > uint64(len(v)) {
			return fmt.Errorf("%w: history: truncated group", errCorrupt)
		}
		fp := string(v[:l])
		v = v[l:]
		count, good := uv()
		if !good {
			return fmt.Errorf("%w: history: truncated group count", errCorrupt)
		}
		if m.DeadByGroup == nil {
			m.DeadByGroup = make(map[string]int64, groups)
		}
		m.DeadByGroup[fp] = int64(count)
	}
	if len(v) == 0 {
		return nil // written without patterns
	}
	patterns, good := uv()
	if !good || patterns > uint64(len(v)) {
		return fmt.Errorf("%w: history: truncated patterns", errCorrupt)
	}
	str := func() (string, bool) {
		l, good := uv()
		if !good || l > uint64(len(v)) {
			return "", false
		}
		s := string(v[:l])
		v = v[l:]
		return s, true
	}
	for range patterns {
		fp, good1 := str()
		pattern, good2 := str()
		if !good1 || !good2 {
			return fmt.Errorf("%w: history: truncated pattern", errCorrupt)
		}
		if m.GroupPatterns == nil {
			m.GroupPatterns = make(map[string]string, patterns)
		}
		m.GroupPatterns[fp] = pattern
	}
	return nil
}

// PutHistory implements store.HistoryStore: one batch, not synced (a
// minute lost to a power failure costs a chart a minute), written under
// catMu so that no record lands under a queue DeleteQueue has just
// deleted.
func (s *Store) PutHistory(ctx context.Context, minutes []store.HistoryMinute) error {
	if err := s.putHistory(ctx, minutes); err != nil {
		return fmt.Errorf("pebble: put history: %w", err)
	}
	return nil
}

func (s *Store) putHistory(ctx context.Context, minutes []store.HistoryMinute) error {
	for _, m := range minutes {
		if m.Node == "" || len(m.Node) > maxHistoryNode {
			return fmt.Errorf("node id of %d bytes: want 1 to %d", len(m.Node), maxHistoryNode)
		}
	}
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.catMu.Lock()
	defer s.catMu.Unlock()
	ids := map[string]uint64{}
	b := s.db.NewBatch()
	defer b.Close()
	var v []byte
	for i := range minutes {
		m := &minutes[i]
		id, seen := ids[m.Queue]
		if !seen {
			info, err := s.getQueue(m.Queue)
			if err != nil && !errors.Is(err, store.ErrQueueNotFound) {
				return err
			}
			id = info.ID // 0: no such queue
			ids[m.Queue] = id
		}
		if id == 0 {
			continue
		}
		v = appendHistory(v[:0], m)
		if err := b.Set(historyKey(id, m.At, m.Node), v, nil); err != nil {
			return err
		}
	}
	if b.Empty() {
		return nil
	}
	return s.commit(func() error { return b.Commit(pebbledb.NoSync) })
}

// ReadHistory implements store.HistoryStore: one range scan per queue, from
// one snapshot.
func (s *Store) ReadHistory(ctx context.Context, queues []string, from, to time.Time) ([]store.HistoryMinute, error) {
	out, err := s.readHistory(ctx, queues, from, to)
	if err != nil {
		return nil, fmt.Errorf("pebble: read history: %w", err)
	}
	return out, nil
}

func (s *Store) readHistory(ctx context.Context, queues []string, from, to time.Time) ([]store.HistoryMinute, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	if to.Before(from) {
		return nil, nil
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	names := append([]string(nil), queues...)
	sort.Strings(names)
	var out []store.HistoryMinute
	for i, name := range names {
		if i > 0 && name == names[i-1] {
			continue
		}
		v, closer, err := snap.Get(catalogKey(name))
		if errors.Is(err, pebbledb.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		info, err := decodeQueueInfo(name, v)
		closer.Close()
		if err != nil {
			return nil, err
		}
		iter, err := snap.NewIterWithContext(ctx, &pebbledb.IterOptions{
			LowerBound: historyKey(info.ID, from, ""),
			UpperBound: historyKey(info.ID, to.Add(time.Second), ""),
		})
		if err != nil {
			return nil, err
		}
		for iter.First(); iter.Valid(); iter.Next() {
			k := iter.Key()
			if len(k) <= historyKeyLen {
				_ = iter.Close()
				return nil, fmt.Errorf("%w: history key of %d bytes", errCorrupt, len(k))
			}
			val, err := iter.ValueAndErr()
			if err != nil {
				_ = iter.Close()
				return nil, err
			}
			m := store.HistoryMinute{Queue: name, Node: string(k[historyKeyLen:]),
				At: time.Unix(int64(binary.BigEndian.Uint64(k[queueKeyLen:historyKeyLen])), 0).UTC()}
			if err := decodeHistory(val, &m); err != nil {
				_ = iter.Close()
				return nil, fmt.Errorf("queue %q: %w", name, err)
			}
			out = append(out, m)
		}
		if err := iter.Close(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// PruneHistory implements store.HistoryStore: one range deletion per queue
// ID found in the 0x15 key space (deleted queues' included), in one batch,
// not synced.
func (s *Store) PruneHistory(ctx context.Context, before time.Time) error {
	if err := s.pruneHistory(ctx, before); err != nil {
		return fmt.Errorf("pebble: prune history: %w", err)
	}
	return nil
}

func (s *Store) pruneHistory(ctx context.Context, before time.Time) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	iter, err := s.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: []byte{prefixHistory},
		UpperBound: []byte{prefixHistory + 1},
	})
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	for valid := iter.First(); valid; {
		k := iter.Key()
		if len(k) < queueKeyLen {
			_ = iter.Close()
			return fmt.Errorf("%w: history key of %d bytes", errCorrupt, len(k))
		}
		id := binary.BigEndian.Uint64(k[1:queueKeyLen])
		if err := b.DeleteRange(historyKey(id, time.Unix(0, 0), ""), historyKey(id, before, ""), nil); err != nil {
			_ = iter.Close()
			return err
		}
		if id == ^uint64(0) {
			break
		}
		valid = iter.SeekGE(queueKey(prefixHistory, id+1))
	}
	if err := iter.Close(); err != nil {
		return err
	}
	if b.Empty() {
		return nil
	}
	return s.commit(func() error { return b.Commit(pebbledb.NoSync) })
}
