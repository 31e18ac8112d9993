package pebble

import (
	"context"
	"encoding/binary"
	"fmt"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/styxq/styx/internal/store"
)

// The write path: item batches (Write, WriteAsync) and the commit that
// faults the store on a failure.

// Write implements store.Store: the batch becomes one Pebble batch,
// committed with fsync when Config.Sync is on. The queue's LastID is raised
// to the greatest of its stored value, b.LastID and every Meta.ID the batch
// inserts, updates or requeues. A batch that fails to encode (an unknown op
// kind, a time outside 1678-2262) changes nothing.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	if _, err := s.write(ctx, b, false); err != nil {
		return fmt.Errorf("pebble: write queue %d: %w", b.QueueID, err)
	}
	return nil
}

// WriteAsync implements store.AsyncWriter. With Config.NoSync off, the batch
// is applied with Pebble's ApplyNoSyncWait: it is in the write-ahead log's
// buffer and visible to reads when WriteAsync returns, and wait returns once
// the log's fsync covers it (Batch.SyncWait). Pebble's log writer syncs
// whatever the log holds, so batches applied while an fsync is in flight
// share the next one, and a batch is durable only after every batch
// applied before it. With NoSync on, wait is nil.
func (s *Store) WriteAsync(ctx context.Context, b *store.Batch) (func() error, error) {
	wait, err := s.write(ctx, b, true)
	if err != nil {
		return nil, fmt.Errorf("pebble: write queue %d: %w", b.QueueID, err)
	}
	if wait == nil {
		return nil, nil
	}
	return func() error {
		if err := wait(); err != nil {
			return fmt.Errorf("pebble: sync queue %d: %w", b.QueueID, err)
		}
		return nil
	}, nil
}

// Sync implements store.Syncer: it syncs the write-ahead log (an empty
// log record written with Pebble's Sync option), so that every batch
// applied before it, the lazy ones (store.Batch.Lazy) included, is
// durable. Without syncing (Config.NoSync) it does nothing.
func (s *Store) Sync(ctx context.Context) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	if !s.writeOpts.Sync {
		return nil
	}
	if err := s.commit(func() error { return s.db.LogData(nil, pebbledb.Sync) }); err != nil {
		return fmt.Errorf("pebble: sync: %w", err)
	}
	return s.writable()
}

// write builds and commits the batch. With async and syncing on, it
// applies the batch without waiting for its fsync and returns the wait.
func (s *Store) write(ctx context.Context, b *store.Batch, async bool) (wait func() error, err error) {
	if err := s.writable(); err != nil {
		return nil, err
	}
	qs, err := s.queue(ctx, b.QueueID)
	if err != nil {
		return nil, err
	}
	// The call ends here, or, with a wait to run, when the wait has run:
	// Close and reopen must not close Pebble under a pending sync.
	handoff := false
	defer func() {
		if !handoff {
			s.exit()
		}
	}()
	if err := s.writable(); err != nil {
		return nil, err
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.deleted {
		return nil, store.ErrQueueNotFound
	}

	pb := s.db.NewBatch()
	defer func() {
		if wait == nil {
			_ = pb.Close()
		}
	}()
	w := batchWriter{pb: pb, qid: b.QueueID, legacy: qs.legacy}
	if err := w.write(b.Ops); err != nil {
		return nil, err
	}
	last, qid := max(qs.lastID, b.LastID, w.last), b.QueueID
	if last > qs.lastID {
		if err := pb.Set(queueKey(prefixLastID, qid), binary.BigEndian.AppendUint64(nil, last), nil); err != nil {
			return nil, err
		}
	}
	if pb.Empty() {
		return nil, nil
	}
	if !async || !s.writeOpts.Sync || b.Lazy {
		opts := s.writeOpts
		if async && b.Lazy {
			opts = pebbledb.NoSync // durable with the next synced batch, or Sync
		}
		if err := s.commit(func() error { return pb.Commit(opts) }); err != nil {
			return nil, err
		}
		s.written.Add(int64(pb.Len()))
		qs.lastID = last
		return nil, nil
	}
	applied := false
	err = s.commit(func() error {
		err := s.db.ApplyNoSyncWait(pb, s.writeOpts)
		applied = err == nil
		return err
	})
	if !applied {
		return nil, err
	}
	// Applied: the batch is Pebble's until its sync is waited for, even
	// when a fault came meanwhile (the wait then reports it).
	s.written.Add(int64(pb.Len()))
	qs.lastID = last
	handoff = true
	return func() error {
		defer s.exit()
		defer pb.Close()
		if err := pb.SyncWait(); err != nil {
			s.setFault("sync", err)
			return err
		}
		// A fault while the batch synced (Pebble's Fatalf returns): its
		// durability is not known, so it is not acknowledged.
		return s.writable()
	}, nil
}

// apiMisuse is told by Pebble's flushes and compactions of a SingleDelete
// that met a key set more than once (NondeterministicSingleDelete: the
// older value could come back; a bug, since format 2 sets each record it
// single-deletes once, ADR 0020), or that deleted nothing
// (IneffectualSingleDelete: harmless, as when a requeue deletes a state
// record that was never written).
func (s *Store) apiMisuse(info pebbledb.PossibleAPIMisuseInfo) {
	switch info.Kind {
	case pebbledb.NondeterministicSingleDelete:
		s.misused.Add(1)
		s.log.Error("storage: a record deleted with SingleDelete was set more than once", "event", info.String())
	case pebbledb.IneffectualSingleDelete:
		s.ineffectual.Add(1)
	default:
		s.log.Warn("storage: pebble reports a possible misuse", "event", info.String())
	}
}

// commit runs a Pebble commit, turning its failure, its panic (a commit
// after the log failed panics inside Pebble) or a fault reported while it
// ran into an error that also faults the store: nothing is acknowledged
// that may not be durable, and nothing is written through this handle
// again.
func (s *Store) commit(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic in pebble: %v", v)
			s.setFault("panic", err)
			// The panic may hold Pebble's commit lock: the handle cannot be
			// closed, so it will not be reopened.
			s.markBroken(err)
		}
	}()
	if err := fn(); err != nil {
		s.setFault("write", err)
		return err
	}
	return s.writable()
}
