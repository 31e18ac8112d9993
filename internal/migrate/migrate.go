// Package migrate copies a stopped embedded (Pebble) store into a
// PostgreSQL database (issue 47; `styx migrate`): every queue definition,
// item (ids, attempts, histories, groups, leases, schedules), dead item,
// deduplication id, held group, redrive task, API key and queue history
// minute, through the stores' own interfaces (internal/store on both
// sides, and the PostgreSQL store's id-keeping inserts,
// postgres.Store.MigrateItems). Every write skips or replaces what the
// database holds already (queues by name, items by id, keys by name, tasks
// by id, minutes by queue, minute and node), so a run again, or after an
// interruption, neither doubles nor loses; the database's item ids are
// then moved past every id copied. No goroutine, no state.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/styxq/styx/internal/backend/embedded"
	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// Config configures Run.
type Config struct {
	// Source is the embedded store to copy (opened by the caller; no
	// server may run on it). Required.
	Source store.Store
	// Target is the PostgreSQL store to copy into, its schema migrated
	// (postgres.OpenStore). Required.
	Target *postgres.Store
	// Now is the migration's time: items whose EnqueueAt is after it are
	// copied as scheduled, and deduplication ids whose window ended
	// before it are left out. Zero means time.Now().
	Now time.Time
	// Progress, when set, is called after each step with what was copied
	// so far.
	Progress func(Progress)
	// PageItems is the most items read from the source and inserted into
	// the database at a time (at most 8 MiB of them either way). 0 means
	// DefaultPageItems (5,000).
	PageItems int
}

// Progress is what a migration has copied so far (cumulative).
type Progress struct {
	// Stage is the step: "queues", "items", "tasks", "keys", "history".
	Stage string
	// Queue is the queue whose items are being copied (stage "items").
	Queue string
	// Items counts the items read from the source (dead items included),
	// Inserted those the database did not hold yet.
	Items, Inserted int64
}

// Result is what Run copied.
type Result struct {
	// Queues is how many queue definitions it copied (created or updated
	// to match the source).
	Queues int
	// Items is how many items (dead items included) it read, Inserted how
	// many of them the database did not hold yet (0 on a second run).
	Items, Inserted int64
	// Dedup and HeldGroups count the deduplication ids (within their
	// window) and held groups copied.
	Dedup, HeldGroups int64
	// Tasks, Keys and HistoryMinutes count the redrive tasks, API keys and
	// history minutes copied.
	Tasks, Keys, HistoryMinutes int
	// MaxID is the greatest item id the source held or handed out (its
	// queues' high marks, store.Store.LastID); the database's ids now
	// start past it.
	MaxID uint64
}

// DefaultPageItems and pageBytes bound one read of items from the source
// and one insert into the database: 5,000 items an insert ran the
// measured migration at about 20,000 items/s, 1,000 at 14,000
// (docs/storage/embedded.md).
const (
	DefaultPageItems = 5000
	pageBytes        = 8 << 20
)

// Run copies cfg.Source into cfg.Target (see the package comment). Call
// Settle on the source first. It stops at the first error; running it
// again resumes (what was copied is skipped).
func Run(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	if cfg.Source == nil || cfg.Target == nil {
		return res, errors.New("migrate: Source and Target are required")
	}
	now := cfg.Now
	if now.IsZero() {
		now = time.Now()
	}
	if cfg.PageItems <= 0 {
		cfg.PageItems = DefaultPageItems
	}
	progress := func(p Progress) {
		if cfg.Progress != nil {
			p.Items, p.Inserted = res.Items, res.Inserted
			cfg.Progress(p)
		}
	}
	src, dst := cfg.Source, cfg.Target
	infos, err := src.ListQueues(ctx, queue.ListQueuesParams{})
	if err != nil {
		return res, fmt.Errorf("migrate: list the queues: %w", err)
	}
	targets := make(map[string]uint64, len(infos))
	for _, info := range infos {
		id, err := copyQueue(ctx, dst, info)
		if err != nil {
			return res, err
		}
		targets[info.Name] = id
		res.Queues++
	}
	progress(Progress{Stage: "queues"})
	for _, info := range infos {
		if err := copyItems(ctx, src, dst, info, targets[info.Name], now, cfg.PageItems, &res, progress); err != nil {
			return res, err
		}
	}
	if err := dst.MoveItemIDsPast(ctx, res.MaxID); err != nil {
		return res, fmt.Errorf("migrate: %w", err)
	}
	tasks, err := src.ListTasks(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate: list the redrive tasks: %w", err)
	}
	for _, t := range tasks {
		if err := dst.PutTask(ctx, t); err != nil {
			return res, fmt.Errorf("migrate: redrive task %s: %w", t.ID, err)
		}
		res.Tasks++
	}
	progress(Progress{Stage: "tasks"})
	keys, err := src.ListKeys(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate: list the API keys: %w", err)
	}
	for _, k := range keys {
		if err := dst.CreateKey(ctx, k); err != nil && !errors.Is(err, store.ErrKeyExists) {
			return res, fmt.Errorf("migrate: API key %s: %w", k.Name, err)
		}
		res.Keys++
	}
	progress(Progress{Stage: "keys"})
	names := make([]string, len(infos))
	for i, info := range infos {
		names[i] = info.Name
	}
	minutes, err := src.ReadHistory(ctx, names, time.Unix(0, 0), queue.MaxTime)
	if err != nil {
		return res, fmt.Errorf("migrate: read the queue history: %w", err)
	}
	for len(minutes) > 0 {
		n := min(len(minutes), cfg.PageItems)
		if err := dst.PutHistory(ctx, minutes[:n]); err != nil {
			return res, fmt.Errorf("migrate: queue history: %w", err)
		}
		res.HistoryMinutes += n
		minutes = minutes[n:]
	}
	progress(Progress{Stage: "history"})
	return res, nil
}

// copyQueue makes the database's queue of info's name match info (created
// when missing) and returns its id there.
func copyQueue(ctx context.Context, dst *postgres.Store, info queue.QueueInfo) (uint64, error) {
	have, err := dst.GetQueue(ctx, info.Name)
	switch {
	case errors.Is(err, store.ErrQueueNotFound):
		info.ID = 0
		made, err := dst.CreateQueue(ctx, info)
		if err != nil {
			return 0, fmt.Errorf("migrate: create queue %s: %w", info.Name, err)
		}
		return made.ID, nil
	case err != nil:
		return 0, fmt.Errorf("migrate: queue %s: %w", info.Name, err)
	}
	info.ID = have.ID
	if err := dst.UpdateQueue(ctx, info); err != nil {
		return 0, fmt.Errorf("migrate: update queue %s: %w", info.Name, err)
	}
	return have.ID, nil
}

// copyItems copies the items, deduplication ids and held groups of the
// queue info (id in the database: to).
func copyItems(ctx context.Context, src store.Store, dst *postgres.Store, info queue.QueueInfo, to uint64, now time.Time, page int,
	res *Result, progress func(Progress)) error {
	// Ids the source handed out to items that are gone (completed,
	// deleted) must not come back either: its high mark counts.
	last, err := src.LastID(ctx, info.ID)
	if err != nil {
		return fmt.Errorf("migrate: queue %s: %w", info.Name, err)
	}
	res.MaxID = max(res.MaxID, last)
	for p := range info.Partitions {
		var after uint64
		for {
			items, err := src.ListItemsWithin(ctx, info.ID, p, after, page, pageBytes)
			if err != nil {
				return fmt.Errorf("migrate: queue %s partition %d: read items: %w", info.Name, p, err)
			}
			if len(items) == 0 {
				break
			}
			for i := range items {
				items[i].Partition = p
				res.MaxID = max(res.MaxID, items[i].Meta.ID, items[i].Meta.BodyID)
			}
			n, err := dst.MigrateItems(ctx, to, items, now)
			if err != nil {
				return fmt.Errorf("migrate: queue %s partition %d: %w", info.Name, p, err)
			}
			res.Items += int64(len(items))
			res.Inserted += n
			progress(Progress{Stage: "items", Queue: info.Name})
			after = items[len(items)-1].Meta.ID
		}
	}
	var ids []string
	var deadlines []int64
	err = src.LoadDedup(ctx, info.ID, func(id string, deadline int64) error {
		if deadline >= now.UnixNano() {
			ids, deadlines = append(ids, id), append(deadlines, deadline)
		}
		return nil
	})
	if err == nil {
		err = dst.MigrateDedup(ctx, to, ids, deadlines)
	}
	if err != nil {
		return fmt.Errorf("migrate: queue %s: deduplication ids: %w", info.Name, err)
	}
	res.Dedup += int64(len(ids))
	var held []queue.HeldGroup
	err = src.LoadHeldGroups(ctx, info.ID, func(h queue.HeldGroup) error { held = append(held, h); return nil })
	if err == nil {
		err = dst.MigrateHeldGroups(ctx, to, held)
	}
	if err != nil {
		return fmt.Errorf("migrate: queue %s: held groups: %w", info.Name, err)
	}
	res.HeldGroups += int64(len(held))
	return nil
}

// Settle opens the embedded backend on s as a server's start would, and
// closes it once every queue has loaded: the dead-letter moves a stopped
// server left in flight (items with a recorded dead decision) are done
// then (ADR 0003), so that every item is in one queue when Run copies it.
// Lifecycle work due by now (expired leases, items past their expiry) is
// done too, as a start would.
func Settle(ctx context.Context, s store.Store, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := embedded.NewManager(ctx, embedded.Config{Store: s, Clock: clock.Real{}, Log: log, Metrics: metrics.New()})
	if err != nil {
		return fmt.Errorf("migrate: open the embedded store: %w", err)
	}
	defer m.Close()
	infos, err := s.ListQueues(ctx, queue.ListQueuesParams{})
	if err != nil {
		return fmt.Errorf("migrate: list the queues: %w", err)
	}
	for _, info := range infos {
		q, err := m.Get(info.Name)
		if err != nil {
			return fmt.Errorf("migrate: queue %s: %w", info.Name, err)
		}
		if _, err := q.Stats(ctx); err != nil {
			return fmt.Errorf("migrate: load queue %s: %w", info.Name, err)
		}
	}
	return nil
}
