package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// itemIDsGap is postgres.itemIDsGap.
const itemIDsGap = 1 << 40

// produceLease produces one item to queue q of m and leases it, returning
// its id.
func produceLease(t *testing.T, m *postgres.Manager, name string) uint64 {
	t.Helper()
	ctx := context.Background()
	q, err := m.Get(name)
	require.NoError(t, err)
	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("x")}}))
	res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "c", Timeout: time.Second})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	return res.Items[0].ID
}

// TestItemIDEpochs: a fresh database records its epoch (system identifier,
// timeline) without moving the ids; a database whose recorded epoch is
// another's (as after a restore into a new cluster, or a promotion: a new
// timeline) has its ids moved past the old ones by the gap, once, by the
// first connection that finds it, and the next node moves nothing more.
func TestItemIDEpochs(t *testing.T) {
	u := pgtest.URL(t)
	ctx := context.Background()
	m := open(t, u)
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	first := produceLease(t, m, "q")
	require.Less(t, first, uint64(itemIDsGap), "a fresh database's ids are not moved")

	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var sys, found, movedTo int64
	var tl int32
	require.NoError(t, conn.QueryRow(ctx, `SELECT system_identifier, timeline, found, moved_to FROM styx_item_id_epochs`).Scan(&sys, &tl, &found, &movedTo))
	var wantSys int64
	var wantTL int32
	require.NoError(t, conn.QueryRow(ctx, `SELECT system_identifier, ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer
		FROM pg_control_system()`).Scan(&wantSys, &wantTL))
	require.Equal(t, wantSys, sys)
	require.Equal(t, wantTL, tl)
	require.Equal(t, found, movedTo, "not moved")

	// The recorded epoch becomes another cluster's: the next node's
	// connections find theirs new.
	_, err = conn.Exec(ctx, `UPDATE styx_item_id_epochs SET system_identifier = system_identifier + 1`)
	require.NoError(t, err)
	m2 := open(t, u)
	next := produceLease(t, m2, "q")
	require.Greater(t, next, first+itemIDsGap, "ids moved past the old epoch's by the gap")
	var epochs int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM styx_item_id_epochs`).Scan(&epochs))
	require.Equal(t, 2, epochs)

	m3 := open(t, u)
	again := produceLease(t, m3, "q")
	require.Greater(t, again, next)
	require.Less(t, again, next+itemIDsGap, "moved once per epoch")
}

// TestItemIDEpochsNonSuperuser: a role that is no superuser and owns only
// its schema migrates it and records its epoch with the database's real
// system identifier and timeline (the functions it reads are executable
// by every role by default).
func TestItemIDEpochsNonSuperuser(t *testing.T) {
	base := pgtest.BaseURL(t)
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	role := "styx_role_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	for _, s := range []string{`CREATE ROLE ` + role + ` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE`, `CREATE SCHEMA ` + role + ` AUTHORIZATION ` + role} {
		_, err := admin.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Logf("drop %s: %v", role, err)
			return
		}
		defer c.Close(context.Background())
		for _, s := range []string{`DROP SCHEMA ` + role + ` CASCADE`, `DROP ROLE ` + role} {
			if _, err := c.Exec(context.Background(), s); err != nil {
				t.Logf("%s: %v", s, err)
			}
		}
	})
	parsed, err := url.Parse(pgtest.WithSearchPath(base, role))
	require.NoError(t, err)
	parsed.User = url.User(role)
	m, err := postgres.Open(ctx, postgres.Config{URL: parsed.String(), Log: testLog(), Metrics: metrics.New()})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	produceLease(t, m, "q")

	var sys int64
	var tl int32
	require.NoError(t, admin.QueryRow(ctx, `SELECT system_identifier, timeline FROM `+role+`.styx_item_id_epochs`).Scan(&sys, &tl))
	require.NotZero(t, sys, "the system identifier is read")
	require.NotZero(t, tl, "the timeline is read")
}

// TestItemIDResidue: a cluster of several (ADR 0023) hands out ids equal
// to its number modulo MaxClusters, from above every id handed out
// before; the residue survives a move of the ids after a failover (the
// gap) and MoveItemIDsPast, and setting it again changes nothing.
func TestItemIDResidue(t *testing.T) {
	u := pgtest.URL(t)
	ctx := context.Background()
	m := open(t, u)
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	before := produceLease(t, m, "q")
	require.NoError(t, m.Store().SetItemIDResidue(ctx, 5))
	residue := func(id uint64) uint64 { return id % postgres.MaxClusters }
	a := produceLease(t, m, "q")
	b := produceLease(t, m, "q")
	require.Greater(t, a, before)
	require.Equal(t, uint64(5), residue(a))
	require.Equal(t, uint64(postgres.MaxClusters), b-a)
	require.NoError(t, m.Store().SetItemIDResidue(ctx, 5))
	require.Equal(t, b+postgres.MaxClusters, produceLease(t, m, "q"), "set again: nothing moves")

	require.NoError(t, m.Store().MoveItemIDsPast(ctx, b+1000))
	c := produceLease(t, m, "q")
	require.Greater(t, c, b+1000)
	require.Equal(t, uint64(5), residue(c))

	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `UPDATE styx_item_id_epochs SET system_identifier = system_identifier + 1`)
	require.NoError(t, err)
	m2 := open(t, u)
	d := produceLease(t, m2, "q")
	require.Greater(t, d, c+itemIDsGap, "moved past the old epoch's ids")
	require.Equal(t, uint64(5), residue(d), "the move keeps the residue")
}
