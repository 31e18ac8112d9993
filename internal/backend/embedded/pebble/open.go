package pebble

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/styxq/styx/internal/store"
)

// Opening and closing the store: Open, the database's options and its
// fault-watching filesystem (openDB), the format marker and the catalog
// (load), the upgrade from format 1 (upgrade) and Close.

// OpenMemory opens an empty store in memory (Config.InMemory).
func OpenMemory() (*Store, error) { return Open(Config{InMemory: true}) }

// Open opens (creating if needed) the store in cfg.Dir. It fails if the
// directory holds a database that is not a Styx store of this format, is
// in use by another process, or is open to other users and not the
// server's to tighten (privateDir).
func Open(cfg Config) (*Store, error) {
	fs := cfg.FS
	if cfg.InMemory {
		if fs == nil {
			fs = vfs.NewMem()
		}
		cfg.Dir, cfg.NoSync, cfg.OnSync = "memory", true, nil
		cfg.CacheBytes = cmp.Or(cfg.CacheBytes, InMemoryCacheBytes)
		cfg.MemTableBytes = cmp.Or(cfg.MemTableBytes, InMemoryMemTableBytes)
	}
	if fs == nil {
		fs = vfs.Default
	}
	if cfg.Dir == "" {
		return nil, errors.New("pebble: open: no directory")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// Only the server's user may read the items (issues 24 and 36): on the
	// disk, the directory is made 0700 or refused (privateDir), and every
	// file and directory Pebble creates in it is 0600 or 0700 (privateFS).
	pfs := newPrivateFS(fs)
	if pfs.disk {
		if err := privateDir(cfg.Dir, log); err != nil {
			return nil, fmt.Errorf("pebble: open %s: %w", cfg.Dir, err)
		}
	}
	if err := pfs.MkdirAll(cfg.Dir, privateDirMode); err != nil {
		return nil, fmt.Errorf("pebble: open %s: %w", cfg.Dir, err)
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	usage, usageErr := fs.GetDiskUsage(cfg.Dir)
	if cfg.MemTableBytes == 0 {
		cfg.MemTableBytes = DefaultMemTableBytes
		if usageErr == nil {
			// On a small disk a smaller memtable, so that the log a
			// restart replays and flushes fits beside the data.
			cfg.MemTableBytes = min(cfg.MemTableBytes, max(minMemTableBytes, usage.TotalBytes/16))
		}
	}
	s := &Store{
		writeOpts:   pebbledb.NoSync,
		queues:      make(map[uint64]*queueState),
		dir:         cfg.Dir,
		log:         log.With("component", "pebble", "dir", cfg.Dir),
		onFault:     cfg.OnFault,
		onSync:      cfg.OnSync,
		poke:        make(chan struct{}, 1),
		stopMonitor: make(chan struct{}),
		monitorDone: make(chan struct{}),
	}
	s.gate.init()
	s.fault.Store(&faultState{})
	s.fs = pfs
	s.minFree = cfg.MinFreeBytes
	if s.minFree == 0 {
		s.minFree = 2 * int64(cfg.MemTableBytes)
		if usageErr == nil {
			s.minFree = min(s.minFree, int64(usage.TotalBytes/4))
		}
	}
	if !cfg.NoSync {
		s.writeOpts = pebbledb.Sync
	}
	// The store holds a reference to the cache until Close, so that it
	// outlives the handles a reopen closes; each handle holds its own.
	cache := pebbledb.NewCache(cfg.CacheBytes)
	s.opts = pebbledb.Options{
		FormatMajorVersion: pebbledb.FormatNewest,
		Cache:              cache,
		// A queue's items mostly die young: with a large memtable, an item
		// produced, leased and completed within one memtable's life never
		// reaches an sstable, so it costs no flush and no compaction.
		MemTableSize:                cfg.MemTableBytes,
		MemTableStopWritesThreshold: 4,
		EventListener:               &pebbledb.EventListener{PossibleAPIMisuse: s.apiMisuse},
	}
	// Below the watermark, open read-only: replaying the log read-write
	// flushes it, which needs room (a full disk must not keep Styx from
	// starting: it starts, serves reads and says why it refuses writes).
	_, space := s.space()
	readOnly := space != nil || !s.roomToReopen()
	db, failure, err := s.openDB(readOnly, false)
	if failure != nil && !readOnly {
		// The disk failed while the database opened (a directory sync, the
		// new log: ADR 0022): this handle must not be written through.
		// Open read-only what the disk holds; the monitor retries
		// read-write.
		if err == nil {
			_, _ = closeDB(db)
		}
		s.log.Warn("storage: the disk failed while opening the database; opening it read-only", "error", failure)
		readOnly = true
		db, _, err = s.openDB(true, false)
		switch {
		case errors.Is(err, pebbledb.ErrDBDoesNotExist):
			cache.Unref()
			return nil, fmt.Errorf("pebble: open %s: the disk failed while creating the store: %w", cfg.Dir, failure)
		case err != nil:
			cache.Unref()
			return nil, fmt.Errorf("pebble: open %s: the disk failed (%w), and opening the store read-only failed too: %v", cfg.Dir, failure, err)
		}
	}
	if err != nil {
		cache.Unref()
		return nil, fmt.Errorf("pebble: open %s: %w", cfg.Dir, err)
	}
	s.db = db
	nf := &faultState{space: space, readOnly: readOnly}
	if readOnly {
		nf.err = s.readOnlyErr(s.fault.Load().err)
	}
	s.fault.Store(nf)
	if readOnly && failure == nil {
		s.log.Warn("storage opened read-only: the disk has no room to replay and flush the log", "error", nf.err)
	}
	if err := s.load(); err != nil {
		_ = db.Close()
		cache.Unref()
		return nil, fmt.Errorf("pebble: open %s: %w", cfg.Dir, err)
	}
	go s.monitor(cmp.Or(cfg.CheckInterval, DefaultCheckInterval))
	return s, nil
}

// openDB opens the database with the store's options, read-only or not,
// through a filesystem of its own (faultFS) that freezes at the first
// failing write, sync or creation; failure is that failure, if one came
// (the store is then faulted, and the handle must not be written
// through). A panic inside Pebble's Open is returned as an error.
//
// With probe, a read-write open then rewrites the format marker with its
// own value, synced: Pebble's Open may write and sync no log at all, so a
// disk whose log syncs fail (and go on failing) opens without a failure,
// and only the probe's sync shows it (issue 48: a reopen that cleared an
// ongoing fault made /health answer 200 until the next write failed). A
// store without a marker (a new one, before load writes it) is not probed.
func (s *Store) openDB(readOnly, probe bool) (db *pebbledb.DB, failure, err error) {
	z := newFreeze(s.setFault)
	opts := s.opts
	opts.ReadOnly = readOnly
	opts.FS = faultFS{FS: s.fs, z: z, onSync: s.onSync}
	// Pebble calls Fatalf when it cannot go on: nothing more is written
	// through this handle either.
	opts.Logger = newLogger(s.log, z.fail)
	defer func() {
		if v := recover(); v != nil {
			db, err = nil, fmt.Errorf("panic in pebble while opening: %v", v)
		}
		if f := z.failure(); f != nil {
			failure = f
		}
	}()
	db, err = pebbledb.Open(s.dir, &opts)
	if err != nil || readOnly || !probe || z.isFrozen() {
		return db, nil, err
	}
	v, closer, gerr := db.Get(formatKey)
	if gerr != nil {
		return db, nil, nil // no marker, or it cannot be read: nothing to rewrite
	}
	v = append([]byte(nil), v...)
	_ = closer.Close()
	if serr := db.Set(formatKey, v, pebbledb.Sync); serr != nil {
		return db, fmt.Errorf("probe write: %w", serr), nil
	}
	return db, nil, nil
}

// load checks the format marker, writing it in a new database, reads the
// queue-ID counter, the catalog and every queue's LastID, and upgrades a
// format 1 store (upgrade).
func (s *Store) load() error {
	v, err := s.get(formatKey)
	v1 := false
	switch {
	case errors.Is(err, pebbledb.ErrNotFound):
		if !s.empty() {
			return errors.New("not a Styx store: no format marker")
		}
		if err := s.writable(); err != nil {
			return fmt.Errorf("new store: %w", err)
		}
		if err := s.commit(func() error { return s.db.Set(formatKey, []byte(formatValue), pebbledb.Sync) }); err != nil {
			return fmt.Errorf("new store: %w", err)
		}
	case err != nil:
		return err
	case string(v) == formatV1Value:
		v1 = true
	case string(v) != formatValue:
		return fmt.Errorf("unknown store format %q", v)
	}

	if err := s.loadClean(err == nil); err != nil {
		return fmt.Errorf("clean-shutdown marker: %w", err)
	}

	if v, err := s.get(queueSeqKey); err == nil {
		if s.lastQueueID, err = decodeUint64(v); err != nil {
			return fmt.Errorf("queue id counter: %w", err)
		}
	} else if !errors.Is(err, pebbledb.ErrNotFound) {
		return err
	}

	iter, err := s.db.NewIter(&pebbledb.IterOptions{
		LowerBound: []byte{prefixCatalog},
		UpperBound: []byte{prefixCatalog + 1},
	})
	if err != nil {
		return err
	}
	defer iter.Close()
	for iter.First(); iter.Valid(); iter.Next() {
		v, err := iter.ValueAndErr()
		if err != nil {
			return err
		}
		name := string(iter.Key()[1:])
		info, err := decodeQueueInfo(name, v)
		if err != nil {
			return fmt.Errorf("queue %q: %w", name, err)
		}
		qs := &queueState{}
		if v, err := s.get(queueKey(prefixLastID, info.ID)); err == nil {
			if qs.lastID, err = decodeUint64(v); err != nil {
				return fmt.Errorf("queue %q: last id: %w", name, err)
			}
		} else if !errors.Is(err, pebbledb.ErrNotFound) {
			return err
		}
		if v, err := s.get(queueKey(prefixLegacy, info.ID)); err == nil {
			if qs.legacy, err = decodeUint64(v); err != nil {
				return fmt.Errorf("queue %q: legacy id: %w", name, err)
			}
		} else if !errors.Is(err, pebbledb.ErrNotFound) {
			return err
		}
		if v1 {
			qs.legacy = qs.lastID
		}
		s.queues[info.ID] = qs
		// Belt and braces: never hand out an ID a stored queue has.
		s.lastQueueID = max(s.lastQueueID, info.ID)
	}
	if err := iter.Error(); err != nil {
		return err
	}
	if v1 {
		s.v1 = true
		return s.upgrade()
	}
	return nil
}

// upgrade makes a format 1 store a format 2 one. Format 1 rewrote an
// item's meta in place (a lease, a renewal) and a dead item's body (an
// edit), so its records may have been set more than once and must be
// deleted with Delete; format 2 writes each meta and body record once and
// deletes it with SingleDelete (ADR 0020). The records themselves are the
// same: upgrading stores, for every queue, its last item ID (the records up
// to it are format 1's) and the new marker, in one synced batch. A store
// opened read-only stays format 1 on disk until a later read-write open;
// meanwhile load has set every queue's legacy ID in memory, so nothing it
// writes is deleted wrongly, and reopen upgrades it once it is writable.
// Called with no call in progress (load, or reopen holding the gate).
func (s *Store) upgrade() error {
	if !s.v1 || s.writable() != nil {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, qs := range s.queues {
		if qs.legacy == 0 {
			continue
		}
		if err := b.Set(queueKey(prefixLegacy, id), binary.BigEndian.AppendUint64(nil, qs.legacy), nil); err != nil {
			return err
		}
	}
	if err := b.Set(formatKey, []byte(formatValue), nil); err != nil {
		return err
	}
	if err := s.commit(func() error { return b.Commit(pebbledb.Sync) }); err != nil {
		return fmt.Errorf("upgrade to %s: %w", formatValue, err)
	}
	s.v1 = false
	s.log.Info("storage upgraded", "format", formatValue)
	return nil
}

// empty reports whether the database holds no keys.
func (s *Store) empty() bool {
	iter, err := s.db.NewIter(nil)
	if err != nil {
		return false
	}
	defer iter.Close()
	return !iter.First()
}

// Close implements store.Store. It waits for calls in progress, then closes
// the database, which syncs its write-ahead log: with Sync off, writes
// acknowledged before a clean Close are durable too.
func (s *Store) Close() error {
	if !s.closing.CompareAndSwap(false, true) {
		return fmt.Errorf("pebble: close: %w", store.ErrClosed)
	}
	close(s.stopMonitor)
	<-s.monitorDone
	s.gate.close()
	defer s.opts.Cache.Unref()
	if s.fault.Load().broken {
		return fmt.Errorf("pebble: close: %w", s.fault.Load().err)
	}
	if s.db == nil {
		return nil
	}
	if s.writable() == nil && !s.cleanPending {
		// The last write: the next Open knows that nothing applied was
		// left unsynced (Unclean). Close's own sync of the log makes it
		// durable, after everything written before it.
		if err := s.commit(func() error { return s.db.Set(cleanKey, nil, pebbledb.NoSync) }); err != nil {
			_ = s.db.Close()
			return fmt.Errorf("pebble: close: mark the shutdown clean: %w", err)
		}
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("pebble: close: %w", err)
	}
	return nil
}

// Unclean reports whether the store was not closed cleanly (Close) before
// Open (store.Recovery): a crash, a kill, a power cut, or a copy of a
// store that was open (a backup). A new store is clean.
func (s *Store) Unclean() bool { return s.unclean }

// loadClean reads and deletes the clean-shutdown marker (Unclean), synced,
// before anything else is written: a crash after Open must not find it.
// existed says the store existed before this Open. A read-only Open leaves
// the marker to the first read-write reopen (dropClean).
func (s *Store) loadClean(existed bool) error {
	_, err := s.get(cleanKey)
	switch {
	case errors.Is(err, pebbledb.ErrNotFound):
		s.unclean = existed
		return nil
	case err != nil:
		return err
	}
	s.cleanPending = true
	if s.writable() != nil {
		return nil
	}
	if err := s.dropClean(); err != nil {
		if s.writable() == nil {
			return err
		}
		// The disk failed (a full disk, an I/O error): the store opens
		// faulted, refusing writes, as after a failure while it runs
		// (ADR 0015); the reopen that heals it deletes the marker before
		// any write (Store.reopen). A full disk must not keep the server
		// from starting.
		s.log.Warn("storage: deleting the clean-shutdown marker failed; writes are refused until the store heals", "error", err)
	}
	return nil
}

// dropClean deletes the clean-shutdown marker, synced, if it is still
// there (cleanPending). Called with no call in progress (Open, reopen).
func (s *Store) dropClean() error {
	if !s.cleanPending {
		return nil
	}
	if err := s.commit(func() error { return s.db.Delete(cleanKey, pebbledb.Sync) }); err != nil {
		return err
	}
	s.cleanPending = false
	return nil
}
