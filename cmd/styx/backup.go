package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/backup"
	"github.com/styxq/styx/internal/migrate"
)

// The storage commands of issue 47: backup (a client of a running
// server), restore and migrate (offline, on a data directory).

func (a *app) backupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Take an online backup of a running server's embedded (Pebble) store into FILE",
		Long: `Ask a running server for a consistent online backup of its embedded store
(/v1/storage/backup; admin key without queue patterns) and write it to FILE, a
tar archive of a Pebble checkpoint ending with a manifest of checksums. Every
item acknowledged before the backup began is in it; the server keeps serving.
The archive is verified as it arrives and kept only when complete (written to
FILE.partial, then renamed). FILE must not exist. Progress (bytes written) goes
to stderr on a terminal. Restore it with 'styx restore'. A server on PostgreSQL
refuses: back its database up with pg_basebackup or pg_dump.`,
		Example: `  styx backup /backups/styx-$(date +%F).tar`,
		Args:    exactArgs(1, "a backup FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			if _, err := os.Lstat(file); err == nil {
				return fmt.Errorf("%s exists: a backup never overwrites a file; name a new one", file)
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				return a.backup(cmd, c, file)
			})
		},
	}
	return a.addClientFlags(cmd)
}

// backup streams the server's backup into file through a verifier.
func (a *app) backup(cmd *cobra.Command, c *styx.Client, file string) error {
	partial := file + ".partial"
	f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	keep := false
	defer func() {
		if !keep {
			_ = f.Close()
			_ = os.Remove(partial)
		}
	}()
	pr, pw := io.Pipe()
	verified := make(chan error, 1)
	var manifest backup.Manifest
	go func() {
		m, err := backup.Read(pr, func(string, io.Reader) error { return nil })
		_, _ = io.Copy(io.Discard, pr)
		manifest = m
		verified <- err
	}()
	tty := a.terminal(a.stderr)
	start, shown := time.Now(), time.Time{}
	n, err := c.StorageBackup(cmd.Context(), io.MultiWriter(f, pw), func(written, total int64) {
		if tty && time.Since(shown) >= 200*time.Millisecond {
			shown = time.Now()
			if total > 0 {
				_, _ = fmt.Fprintf(a.stderr, "\rbackup: %s of about %s written", bytesText(written), bytesText(total))
			} else {
				_, _ = fmt.Fprintf(a.stderr, "\rbackup: %s written", bytesText(written))
			}
		}
	})
	_ = pw.CloseWithError(err)
	verr := <-verified
	if tty {
		_, _ = fmt.Fprintln(a.stderr)
	}
	if err != nil {
		return err
	}
	if verr != nil {
		return fmt.Errorf("the backup stream did not verify, nothing kept: %w", verr)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(partial, file); err != nil {
		return err
	}
	keep = true
	took := time.Since(start)
	_, err = fmt.Fprintf(a.stdout, "backup %s: %s (%d files of the store, %s), taken %s, store %s, sha256 %s; written in %s (%s/s)\n",
		file, bytesText(n), len(manifest.Files), bytesText(manifest.Bytes), manifest.CreatedAt.Format(time.RFC3339), manifest.StoreFormat,
		manifest.SHA256, took.Round(time.Millisecond), bytesText(int64(float64(n)/max(took.Seconds(), 0.001))))
	return err
}

func (a *app) restoreCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:         "restore FILE --data-dir DIR",
		Annotations: offlineCmd,
		Short:       "Write a backup (styx backup) into an empty data directory",
		Long: `Verify a backup taken by 'styx backup' (its manifest and checksums) and write
it into DIR, which must be empty or absent: a restore never writes over a store.
Then start 'styx server --data-dir DIR'. What the restored server holds is the
store as it was when the backup began: items completed since come back (they
will be delivered again: at-least-once), items produced since are not there.
The restore moves every queue's item ids well past any id the backed-up server
can have handed out since (2^40 ns, about 18 minutes, past the later of now and
the stored ids), so a lease handle from the old server never names an item of
the restored one.`,
		Example: `  styx restore /backups/styx-2026-11-29.tar --data-dir /var/lib/styx`,
		Args:    exactArgs(1, "a backup FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return errors.New("--data-dir is required: the empty (or absent) directory to restore into")
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			start := time.Now()
			res, err := backup.Restore(cmd.Context(), f, dir, time.Now(), nil)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "restored %s into %s: %d files, %s, taken %s by styx %s; %d queues, item ids moved to %d; in %s\n",
				args[0], dir, len(res.Manifest.Files), bytesText(res.Manifest.Bytes), res.Manifest.CreatedAt.Format(time.RFC3339),
				res.Manifest.StyxVersion, res.Queues, res.IDsFrom, time.Since(start).Round(time.Millisecond))
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "data-dir", "", "the directory to restore into: empty or absent (required)")
	return cmd
}

func (a *app) migrateCmd() *cobra.Command {
	var fromDir, fromBackup, to string
	cmd := &cobra.Command{
		Use:         "migrate (--from-data-dir DIR | --from-backup FILE) --to-postgres URL",
		Annotations: offlineCmd,
		Short:       "Copy an embedded (Pebble) store into a PostgreSQL database",
		Long: `Copy every queue, item (same ids, attempts, histories, groups, deduplication
ids; leased items keep their lease and its deadline, scheduled items their
time), dead item (same ids and last errors), redrive task, API key and queue
history from a stopped server's data directory (or a backup) into a PostgreSQL
database, new or Styx-initialised (the schema migrations run first). The
database's item ids then start past every id copied. Every write skips what
the database holds already, so running it again, or after an interruption,
neither doubles nor loses. Run it before starting nodes on the database: an
item a node completed since would be copied again. The activity log is not
copied. Progress goes to stderr.`,
		Example: `  styx migrate --from-data-dir /var/lib/styx --to-postgres 'postgres://styx@db/styx'`,
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (fromDir == "") == (fromBackup == "") {
				return errors.New("give one of --from-data-dir DIR (a stopped server's) and --from-backup FILE (styx backup's)")
			}
			if to == "" {
				if v, ok := a.lookupEnv("STYX_POSTGRES_URL"); ok {
					to = v
				}
			}
			if to == "" {
				return errors.New("--to-postgres URL is required (env STYX_POSTGRES_URL)")
			}
			return a.migrate(cmd, fromDir, fromBackup, to)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fromDir, "from-data-dir", "", "the data directory of a stopped Styx server (Pebble)")
	f.StringVar(&fromBackup, "from-backup", "", "a backup file of styx backup, restored into a temporary directory first")
	f.StringVar(&to, "to-postgres", "", "the PostgreSQL database to copy into, a pgx URL (env STYX_POSTGRES_URL)")
	return cmd
}

// migrate runs a migration from dir or from the backup file into the
// database at url.
func (a *app) migrate(cmd *cobra.Command, dir, file, url string) error {
	ctx := cmd.Context()
	if file != "" {
		tmp, err := os.MkdirTemp("", "styx-migrate-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		dir = filepath.Join(tmp, "store")
		in, err := os.Open(file)
		if err != nil {
			return err
		}
		_, err = backup.Restore(ctx, in, dir, time.Now(), nil)
		_ = in.Close()
		if err != nil {
			return err
		}
	} else if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--from-data-dir %s does not exist", dir)
	}
	src, err := pebble.Open(pebble.Config{Dir: dir, MinFreeBytes: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("open %s (is a server still running on it?): %w", dir, err)
	}
	defer func() { _ = src.Close() }()
	if err := migrate.Settle(ctx, src, nil); err != nil {
		return err
	}
	dst, err := postgres.OpenStore(ctx, url, 4)
	if err != nil {
		return err
	}
	defer func() { _ = dst.Close() }()
	start, shown := time.Now(), time.Time{}
	res, err := migrate.Run(ctx, migrate.Config{Source: src, Target: dst, Progress: func(p migrate.Progress) {
		if time.Since(shown) >= time.Second || p.Stage != "items" {
			shown = time.Now()
			if p.Stage == "items" {
				_, _ = fmt.Fprintf(a.stderr, "migrate: items of queue %s: %d read, %d new so far\n", p.Queue, p.Items, p.Inserted)
			} else {
				_, _ = fmt.Fprintf(a.stderr, "migrate: %s copied\n", p.Stage)
			}
		}
	}})
	if err != nil {
		return fmt.Errorf("%w (run the same command again to resume: what was copied is skipped)", err)
	}
	took := time.Since(start)
	_, err = fmt.Fprintf(a.stdout, "migrated %d queues, %d items (%d new), %d deduplication ids, %d held groups, %d redrive tasks, %d API keys, "+
		"%d history minutes in %s (%.0f items/s); item ids continue past %d\n", res.Queues, res.Items, res.Inserted, res.Dedup, res.HeldGroups,
		res.Tasks, res.Keys, res.HistoryMinutes, took.Round(time.Millisecond), float64(res.Items)/max(took.Seconds(), 0.001), res.MaxID)
	return err
}

// bytesText is n bytes in a unit a person reads.
func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
