package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// IDGap is how far past the later of the restore's time and its stored high
// mark Restore moves each queue's item ids (queue.NextID follows the wall
// clock in nanoseconds, and runs ahead of it by one per id under a burst):
// 2^40 ns, about 18 minutes, the same 2^40 as the PostgreSQL backend's
// epoch gap (internal/backend/postgres/ids.go). The ids the backed-up
// server handed out after the backup followed its clock, so the restored
// server hands out none of them again while the two clocks are within that
// of each other.
const IDGap = 1 << 40

// Restored says what Restore did.
type Restored struct {
	// Manifest is the backup's, verified.
	Manifest Manifest
	// Queues is how many queues the restored store holds; each one's item
	// ids were moved.
	Queues int
	// IDsFrom is the high mark the item ids were moved to: a queue's next
	// item gets an id above it (per queue; the greatest when their stored
	// marks differ).
	IDsFrom uint64
}

// Restore writes the backup read from r into dir, which must be empty or
// absent (created 0700), verifying it (Read), then opens the store there
// and moves every queue's item ids to IDGap past now or past its own high
// mark, whichever is later, so that no item id the backed-up server handed
// out after the backup is handed out again (a stale lease handle names no
// item of the restored server). progress, when not nil, gets the bytes of
// files written so far. On failure nothing is left in dir (a directory
// Restore created is removed). A non-empty dir is refused before r is read.
func Restore(ctx context.Context, r io.Reader, dir string, now time.Time, progress func(written int64)) (Restored, error) {
	created, err := emptyDir(dir)
	if err != nil {
		return Restored{}, err
	}
	out, err := restore(ctx, r, dir, now, progress)
	if err != nil {
		if created {
			_ = os.RemoveAll(dir)
		} else if entries, rerr := os.ReadDir(dir); rerr == nil {
			for _, e := range entries {
				_ = os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
		return Restored{}, err
	}
	return out, nil
}

func restore(ctx context.Context, r io.Reader, dir string, now time.Time, progress func(int64)) (Restored, error) {
	var written int64
	buf := make([]byte, 256<<10)
	m, err := Read(r, func(name string, src io.Reader) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		n, err := copyProgress(f, src, buf, written, progress)
		written += n
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("restore: write %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return Restored{}, err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	out := Restored{Manifest: m}
	out.Queues, out.IDsFrom, err = AdvanceIDs(ctx, dir, now)
	return out, err
}

// emptyDir checks that dir is empty or absent, creating it 0700 when
// absent (created reports that).
func emptyDir(dir string) (created bool, err error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, fmt.Errorf("restore: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("restore: %w", err)
	case len(entries) > 0:
		return false, fmt.Errorf("restore: the directory %s is not empty (%d entries): a restore writes into an empty or absent "+
			"directory only, and never over a store", dir, len(entries))
	}
	return false, nil
}

// AdvanceIDs opens the Pebble store in dir (no server may hold it) and
// moves every queue's item id high mark to IDGap past the later of now and
// its stored mark, through the store's own write path (a batch that only
// raises store.Batch.LastID). It returns the queues moved and the greatest
// mark set.
func AdvanceIDs(ctx context.Context, dir string, now time.Time) (queues int, to uint64, err error) {
	s, err := pebble.Open(pebble.Config{Dir: dir, MinFreeBytes: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, 0, fmt.Errorf("restore: open the restored store: %w", err)
	}
	defer func() {
		if cerr := s.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("restore: close the restored store: %w", cerr)
		}
	}()
	infos, err := s.ListQueues(ctx, queue.ListQueuesParams{})
	if err != nil {
		return 0, 0, fmt.Errorf("restore: list the queues: %w", err)
	}
	for _, info := range infos {
		last, err := s.LastID(ctx, info.ID)
		if err != nil {
			return 0, 0, fmt.Errorf("restore: queue %s: %w", info.Name, err)
		}
		mark := max(last, uint64(now.UnixNano())) + IDGap
		if err := s.Write(ctx, &store.Batch{QueueID: info.ID, LastID: mark}); err != nil {
			return 0, 0, fmt.Errorf("restore: queue %s: move its ids: %w", info.Name, err)
		}
		to = max(to, mark)
	}
	return len(infos), to, nil
}
