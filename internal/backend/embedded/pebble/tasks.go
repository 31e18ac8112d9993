package pebble

import (
	"context"
	"fmt"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/styxq/styx/internal/store"
)

// Task records (store.TaskStore, 0x04).

// PutTask implements store.TaskStore. The change is synced whatever
// Config.NoSync says, as catalog changes are.
func (s *Store) PutTask(ctx context.Context, t store.TaskRecord) error {
	if err := s.putTask(ctx, t); err != nil {
		if len(t.ID) > maxTaskID {
			return fmt.Errorf("pebble: put task: %w", err)
		}
		return fmt.Errorf("pebble: put task %q: %w", t.ID, err)
	}
	return nil
}

func (s *Store) putTask(ctx context.Context, t store.TaskRecord) error {
	if t.ID == "" || len(t.ID) > maxTaskID {
		return fmt.Errorf("task id of %d bytes: want 1 to %d", len(t.ID), maxTaskID)
	}
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	return s.commit(func() error { return s.db.Set(taskKey(t.ID), appendTask(nil, &t), pebbledb.Sync) })
}

// ListTasks implements store.TaskStore. It reads the 0x04 range.
func (s *Store) ListTasks(ctx context.Context) ([]store.TaskRecord, error) {
	tasks, err := s.listTasks(ctx)
	if err != nil {
		return nil, fmt.Errorf("pebble: list tasks: %w", err)
	}
	return tasks, nil
}

func (s *Store) listTasks(ctx context.Context) ([]store.TaskRecord, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	iter, err := s.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: []byte{prefixTask},
		UpperBound: []byte{prefixTask + 1},
	})
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	var out []store.TaskRecord
	for iter.First(); iter.Valid(); iter.Next() {
		v, err := iter.ValueAndErr()
		if err != nil {
			return nil, err
		}
		id := string(iter.Key()[1:])
		t, err := decodeTask(id, v)
		if err != nil {
			return nil, fmt.Errorf("task %q: %w", id, err)
		}
		out = append(out, t)
	}
	return out, iter.Error()
}

// DeleteTask implements store.TaskStore. The change is synced whatever
// Config.NoSync says.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	if err := s.enterWrite(ctx); err != nil {
		return fmt.Errorf("pebble: delete task %q: %w", id, err)
	}
	defer s.exit()
	if err := s.commit(func() error { return s.db.Delete(taskKey(id), pebbledb.Sync) }); err != nil {
		return fmt.Errorf("pebble: delete task %q: %w", id, err)
	}
	return nil
}
