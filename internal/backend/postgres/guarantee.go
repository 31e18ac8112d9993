package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Durability is what the database's settings make an acknowledgement worth,
// as a node reads them at start (a setting changed later is not seen until
// the node restarts).
type Durability struct {
	// SynchronousCommit is the node's sessions' synchronous_commit (off,
	// local, remote_write, on or remote_apply; the URL may set it with
	// options=-c synchronous_commit=…).
	SynchronousCommit string
	// StandbyNames is synchronous_standby_names; "" means no commit waits
	// for a standby.
	StandbyNames string
	// Standbys is how many standbys stream from the database
	// (pg_stat_replication rows).
	Standbys int
}

// Guarantee says, in one sentence, what an acknowledged item survives
// under d, and whether that falls short of surviving the loss of the
// primary while standbys exist or of surviving a crash of PostgreSQL
// (weak: logged as a warning).
func (d Durability) Guarantee() (text string, weak bool) {
	waits := d.StandbyNames != "" && d.SynchronousCommit != "local" && d.SynchronousCommit != "off"
	switch {
	case d.SynchronousCommit == "off":
		return "an acknowledged item may be lost by a crash of PostgreSQL (synchronous_commit = off: its last commits are not flushed yet), and by a failover", true
	case waits && d.SynchronousCommit == "remote_write":
		return "an acknowledged item is flushed on the primary and written on a synchronous standby (synchronous_commit = remote_write): it survives a failover to that standby unless the standby's host crashes too", false
	case waits:
		return "an acknowledged item is flushed on the primary and on a synchronous standby: it survives the loss of the primary when a synchronous standby is promoted", false
	case d.Standbys > 0:
		return "an acknowledged item is flushed on the primary only: replication is asynchronous, so a failover may lose the last acknowledged items (list the standby in synchronous_standby_names)", true
	default:
		return "an acknowledged item is flushed on the primary; no standby streams from it (losing the primary's disk loses what a backup does not hold)", false
	}
}

// readDurability reads d's settings on one of the pool's connections.
func readDurability(ctx context.Context, pool *pgxpool.Pool) (Durability, error) {
	var d Durability
	err := pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
		(SELECT count(*) FROM pg_stat_replication)`).Scan(&d.SynchronousCommit, &d.StandbyNames, &d.Standbys)
	d.StandbyNames = strings.TrimSpace(d.StandbyNames)
	if err != nil {
		return d, wrap("read the durability settings", err)
	}
	return d, nil
}

// logDurability logs what an acknowledgement is worth on the database
// (docs/storage/postgres.md, "High availability"): a warning when it may
// be lost by a failover or a crash, information otherwise (log may be
// nil). A failure to read the settings is logged and otherwise ignored.
func logDurability(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) Durability {
	d, err := readDurability(ctx, pool)
	if log == nil {
		return d
	}
	if err != nil {
		log.Warn("postgres: could not read the durability settings", "error", err)
		return d
	}
	text, weak := d.Guarantee()
	level := slog.LevelInfo
	if weak {
		level = slog.LevelWarn
	}
	log.Log(ctx, level, fmt.Sprintf("postgres: %s", text), "synchronous_commit", d.SynchronousCommit,
		"synchronous_standby_names", d.StandbyNames, "standbys", d.Standbys)
	return d
}
