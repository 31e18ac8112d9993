package migrate_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/backup"
	"github.com/styxq/styx/internal/migrate"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// TestMeasureRates measures the figures of docs/storage/embedded.md: a
// backup over the API, a restore and two migrations of 100,000 items of
// 100 bytes (4 partitions). Opt-in (STYX_MEASURE=1, with the PostgreSQL test
// database): it takes tens of seconds.
func TestMeasureRates(t *testing.T) {
	if os.Getenv("STYX_MEASURE") == "" {
		t.Skip("a measurement: set STYX_MEASURE=1 (and STYX_TEST_POSTGRES_URL)")
	}
	dir := t.TempDir()
	s := &servertest.Server{T: t, B: servertest.Backend{Name: daemon.StoragePebble, Open: func(t *testing.T) store.Store {
		st, err := pebble.Open(pebble.Config{Dir: dir, Logger: servertest.TestLogger()})
		require.NoError(t, err)
		return st
	}}}
	s.Boot()
	s.CreateQueue(&pb.QueueInfo{QueueName: "q", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 4})
	payload := bytes.Repeat([]byte("x"), 100)
	for b := 0; b < 100; b++ {
		req := &pb.QueueProduceRequest{QueueName: "q", RequestTimeout: "1m"}
		for range 1000 {
			req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: payload})
		}
		require.NoError(t, s.C.QueueProduce(ctx, req))
	}
	var buf bytes.Buffer
	start := time.Now()
	n, err := s.C.StorageBackup(ctx, &buf, nil)
	require.NoError(t, err)
	took := time.Since(start)
	t.Logf("backup: %d bytes in %s: %.1f MB/s, %.0f items/s", n, took, float64(n)/took.Seconds()/1e6, 100000/took.Seconds())
	s.Stop()
	rdir := filepath.Join(t.TempDir(), "r")
	start = time.Now()
	_, err = backup.Restore(ctx, bytes.NewReader(buf.Bytes()), rdir, time.Now(), nil)
	require.NoError(t, err)
	t.Logf("restore: %s", time.Since(start))
	src, err := pebble.Open(pebble.Config{Dir: dir, Logger: servertest.TestLogger()})
	require.NoError(t, err)
	defer src.Close()
	start = time.Now()
	require.NoError(t, migrate.Settle(ctx, src, nil))
	t.Logf("settle: %s", time.Since(start))
	pg, err := postgres.OpenStore(ctx, pgtest.URL(t), 4)
	require.NoError(t, err)
	defer pg.Close()
	for i := range 2 {
		start = time.Now()
		res, err := migrate.Run(ctx, migrate.Config{Source: src, Target: pg})
		require.NoError(t, err)
		took = time.Since(start)
		t.Logf("migrate run %d: %d items (%d new) in %s: %.0f items/s", i+1, res.Items, res.Inserted, took, float64(res.Items)/took.Seconds())
	}
}
