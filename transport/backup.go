package transport

import (
	"net/http"
	"strconv"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/audit"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/backup"
	pb "github.com/styxq/styx/styxpb"
)

// PathBackup is the /v1 call that streams an online backup of the embedded
// store (issue 47; internal/backup).
const PathBackup = "/v1/storage/backup"

// HeaderBackupBytes is the answer header of /v1/storage/backup giving the
// size of the store's files in bytes (what the client's progress counts
// to; the archive adds its headers and the manifest).
const HeaderBackupBytes = "Styx-Backup-Bytes"

// errBackupPostgres answers /v1/storage/backup on a server without an
// embedded store.
var errBackupPostgres = apierr.New(apierr.NotImplemented, "storage backup is not served by this backend; /v1/storage/backup "+
	"backs up the embedded (Pebble) store, and a PostgreSQL deployment is backed up by its database's own tools: "+
	"pg_basebackup (a physical copy; with WAL archiving, point-in-time recovery) or pg_dump (a logical copy of the Styx schema); "+
	"see docs/storage/postgres.md")

// serveBackup answers /v1/storage/backup, after the pipeline has
// authenticated the key and admitted the (empty) body: the request
// decoded, the access rule (admin scope, a key without queue patterns),
// then a checkpoint of the store (internal/backup), taken before the first
// byte of the answer, so that every write answered before the call arrived
// is in it. The answer streams the checkpoint's files as they are read: no
// write deadline bounds it (a large store takes as long as its client
// reads), each write is charged to the key's share of the in-flight budget
// only while it is written, and no queue's loop waits for it (the
// checkpoint holds the store only while Pebble links its files). The call
// is audited (the store's bytes and files) before the first byte leaves.
// A failure after that ends the archive without its manifest, which
// backup.Read and the CLI refuse.
func (h *Handler) serveBackup(w http.ResponseWriter, r *http.Request) {
	req := &pb.StorageBackupRequest{}
	if err := h.decode(w, r, req); err != nil {
		h.fail(w, r, err)
		return
	}
	ctx := r.Context()
	if err := auth.Authorize(ctx, auth.Access{Op: r.URL.Path}); err != nil {
		h.fail(w, r, err)
		return
	}
	if h.cfg.Backup == nil {
		h.fail(w, r, errBackupPostgres)
		return
	}
	c, err := h.cfg.Backup.Checkpoint(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer func() { _ = c.Close() }()
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	rec := audit.From(ctx)
	rec.Add("bytes", c.Size(), "files", len(c.Files()))
	w.Header().Set("Content-Type", backup.ContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(HeaderBackupBytes, strconv.FormatInt(c.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if _, err := backup.WriteCheckpoint(ctx, w, c, time.Now(), nil); err != nil {
		h.cfg.Log.Error("storage backup failed after its answer began; the archive ends without its manifest", "error", err, "key", rec.Key)
	}
}
