// Package activity is the activity log (issue 49): the audit record of
// every successful audited call (internal/audit: who, which call, which
// queue, what it did), stored through store.ActivityStore on every backend
// (Pebble and memory in the store, PostgreSQL in a table every node
// shares), and read back per queue, newest first, for /v1/activity.list,
// `styx activity` and the console's Activity panels.
//
// The transport pipeline writes a call's record (Log.Write) once the door
// has done the call and before its answer leaves, so a client that reads
// the log after its answer finds its call there. A record that cannot be
// stored does not turn the call into a failure (what it did is done): it
// is logged at ERROR with the whole record and counted by
// styx_activity_write_errors_total, and the audit line is written as
// always.
//
// Retention: the newest MaxRecords records (10,000 by default) of the
// whole server (on PostgreSQL, of every node) and none older than
// Retention (30 days by default), pruned as records are written: by the
// write that follows every PruneEvery writes of a node, and by its first
// write and the first after an hour without a prune.
package activity

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/styxq/styx/internal/audit"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/store"
)

// Defaults of Config.
const (
	// DefaultRetention is how long a record is kept: 30 days.
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultMaxRecords is how many records are kept at most: 10,000.
	DefaultMaxRecords = 10_000
	// DefaultPruneEvery is how many writes of a node go between prunes:
	// 100.
	DefaultPruneEvery = 100
	// WriteTimeout bounds the write of one record (and the prune that may
	// follow it): 5 seconds. The call is answered when it passes.
	WriteTimeout = 5 * time.Second
	// pruneInterval is the longest a node writes records without pruning.
	pruneInterval = time.Hour
)

// Config configures a Log.
type Config struct {
	// Store keeps the records. Required.
	Store store.ActivityStore
	// Clock stamps the records; nil is the system clock.
	Clock clock.Clock
	// Log gets the ERROR line of a record not stored; nil discards it.
	Log *slog.Logger
	// WriteErrors counts the records not stored
	// (metrics.RegisterActivity); nil counts nothing.
	WriteErrors prometheus.Counter
	// Retention is how long records are kept; 0 means DefaultRetention.
	Retention time.Duration
	// MaxRecords is how many records are kept at most; 0 means
	// DefaultMaxRecords.
	MaxRecords int
	// PruneEvery is how many writes go between prunes; 0 means
	// DefaultPruneEvery.
	PruneEvery int
}

// Log writes and reads the activity log. Safe for concurrent use.
type Log struct {
	cfg Config
	// mu guards the prune schedule: writes since the last prune, and its
	// time. A leaf, never held across a store call.
	mu         sync.Mutex
	sincePrune int
	lastPrune  time.Time
}

// New returns the activity log over cfg.Store.
func New(cfg Config) *Log {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.MaxRecords <= 0 {
		cfg.MaxRecords = DefaultMaxRecords
	}
	if cfg.PruneEvery <= 0 {
		cfg.PruneEvery = DefaultPruneEvery
	}
	return &Log{cfg: cfg}
}

// Write stores rec, the record of a successful audited call, and prunes
// the log when its turn has come (see the package comment). It never
// fails: a record it cannot store, or a failed prune, is logged at ERROR
// and the record counted by Config.WriteErrors. It runs within
// WriteTimeout of its own, whatever ctx's cancellation (the call is done:
// a client gone must not lose its record); ctx's values are kept.
func (l *Log) Write(ctx context.Context, rec *audit.Record) {
	if l == nil || rec == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), WriteTimeout)
	defer cancel()
	r := Of(rec, l.cfg.Clock.Now())
	if _, err := l.cfg.Store.PutActivity(ctx, r); err != nil {
		if l.cfg.WriteErrors != nil {
			l.cfg.WriteErrors.Inc()
		}
		attrs := []any{"error", err, "path", r.Op, "key", r.Key, "queue", r.Queue, "door", r.Door}
		for _, d := range r.Details {
			attrs = append(attrs, d.Name, d.Value)
		}
		l.cfg.Log.Error("activity: record not stored; the call was done", attrs...)
		return
	}
	if !l.pruneDue(r.At) {
		return
	}
	if err := l.cfg.Store.PruneActivity(ctx, r.At.Add(-l.cfg.Retention), l.cfg.MaxRecords); err != nil {
		l.cfg.Log.Error("activity: prune failed; tried again at the next write", "error", err)
		l.mu.Lock()
		l.lastPrune = time.Time{}
		l.mu.Unlock()
	}
}

// pruneDue counts a write and reports whether a prune is due after it.
func (l *Log) pruneDue(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sincePrune++
	if l.sincePrune < l.cfg.PruneEvery && !l.lastPrune.IsZero() && now.Sub(l.lastPrune) < pruneInterval {
		return false
	}
	l.sincePrune, l.lastPrune = 0, now
	return true
}

// Of makes the record of a successful audited call answered at now: its
// key, door, action, operation, queue, and what it did (rec.Attrs, slog
// key-value pairs, their values as text).
func Of(rec *audit.Record, now time.Time) store.ActivityRecord {
	r := store.ActivityRecord{At: now, Key: rec.Key, Door: rec.Door, Action: rec.Action, Op: rec.Op, Queue: rec.Queue}
	for i := 0; i+1 < len(rec.Attrs); i += 2 {
		name, ok := rec.Attrs[i].(string)
		if !ok {
			continue
		}
		r.Details = append(r.Details, store.ActivityDetail{Name: name, Value: fmt.Sprint(rec.Attrs[i+1])})
	}
	return r
}

// MaxListLimit is the most records one List returns: 1,000.
const MaxListLimit = 1000

// ListParams selects a page of the log for List.
type ListParams struct {
	// Queue keeps one queue's records; "" keeps every queue's that
	// Allowed allows.
	Queue string
	// Before keeps the records older than the record with this ID (the
	// last of the previous page); 0 starts at the newest.
	Before uint64
	// Limit is the most records returned, 1 to MaxListLimit.
	Limit int
	// Allowed says whether a record of a queue may be shown (the request's
	// key covers it, auth.Allowed); records of no queue are shown when it
	// allows "". Nil allows every record.
	Allowed func(queue string) bool
}

// List returns up to p.Limit records, newest first, and the pivot of the
// next page: the last record's ID when the page is full (older records may
// follow), 0 when the log ended before. The records Allowed refuses are
// skipped and not counted.
func (l *Log) List(ctx context.Context, p ListParams) ([]store.ActivityRecord, uint64, error) {
	if p.Limit <= 0 || p.Limit > MaxListLimit {
		return nil, 0, fmt.Errorf("activity: limit %d: want 1 to %d", p.Limit, MaxListLimit)
	}
	var out []store.ActivityRecord
	before := p.Before
	for {
		page, err := l.cfg.Store.ListActivity(ctx, store.ActivityListParams{Queue: p.Queue, Before: before, Limit: p.Limit})
		if err != nil {
			return nil, 0, err
		}
		for _, r := range page {
			if p.Allowed == nil || p.Allowed(r.Queue) {
				out = append(out, r)
				if len(out) == p.Limit {
					return out, r.ID, nil
				}
			}
		}
		if len(page) < p.Limit {
			return out, 0, nil
		}
		before = page[len(page)-1].ID
	}
}
