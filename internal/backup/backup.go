// Package backup is the online backup and the restore of the embedded
// (Pebble) store (issue 47): a backup is a Pebble checkpoint of the running
// store (every write answered before it began is in it), streamed as a tar
// archive of the checkpoint's files followed by a manifest (the Styx
// version, the store format, when it was taken, each file's size and
// SHA-256, and one SHA-256 over them all); a restore writes the files into
// an empty directory, verifies them against the manifest and moves every
// queue's item ids past any id the backed-up server may have handed out
// after the backup (Restore). No goroutine, no state.
//
// The archive, in order:
//
//	store/<file>    each file of the checkpoint, mode 0600, in name order
//	MANIFEST.json   the Manifest, last: a stream cut short has none
package backup

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"runtime/debug"
	"strings"
	"time"

	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/store"
)

// Format names the archive layout a Manifest describes.
const Format = "styx-backup-1"

// ManifestName is the archive's last entry.
const ManifestName = "MANIFEST.json"

// storeDir is the archive directory of the store's files.
const storeDir = "store/"

// ContentType is the media type of a backup stream (the answer of
// /v1/storage/backup).
const ContentType = "application/vnd.styx.backup+tar"

// Manifest describes a backup: what took it and when, and the files it
// holds with their checksums. It is the archive's last entry.
type Manifest struct {
	// Format is Format.
	Format string `json:"format"`
	// StyxVersion is the version of the server that took the backup (its
	// module version and VCS revision; "unknown" without build
	// information).
	StyxVersion string `json:"styx_version"`
	// StoreFormat is the Pebble store's format ("styx-store-2",
	// pebble.FormatVersion); a restore refuses another.
	StoreFormat string `json:"store_format"`
	// CreatedAt is when the checkpoint was taken, by the server's clock.
	CreatedAt time.Time `json:"created_at"`
	// Files are the store's files, in archive order.
	Files []File `json:"files"`
	// Bytes is the sum of the files' sizes.
	Bytes int64 `json:"bytes"`
	// SHA256 is the SHA-256 of the files' contents, concatenated in
	// archive order, in hex.
	SHA256 string `json:"sha256"`
}

// File is one file of a backup.
type File struct {
	// Name is the file's name in the store's directory.
	Name string `json:"name"`
	// Size is its length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the SHA-256 of its contents, in hex.
	SHA256 string `json:"sha256"`
}

// Source is a store that takes consistent online snapshots: the Pebble
// store (pebble.Store.Checkpoint), on disk or in memory.
type Source interface {
	Checkpoint(ctx context.Context) (*pebble.Checkpoint, error)
}

// SourceOf returns the Source beneath s (unwrapping stores that wrap
// another and say so with Unwrap, as the fault-injection wrapper does), or
// false when s takes no snapshots (it is not a Pebble store).
func SourceOf(s store.Store) (Source, bool) {
	return store.Find[Source](s)
}

// Version returns the version of the running Styx binary for a manifest:
// the main module's version and, when Go recorded it, the VCS revision
// ("+dirty" for a modified tree); "unknown" without build information.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(12, len(s.Value))]
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return v
}

// Write takes a checkpoint of src and writes it to w as a backup archive,
// the manifest last, calling progress (when not nil) with the bytes of
// files written so far after each chunk. The checkpoint is taken before
// the first byte is written and removed when Write returns; the store
// serves its queues meanwhile. now is the manifest's CreatedAt. An error
// after the first byte leaves w without a manifest: a reader (Read)
// refuses it.
func Write(ctx context.Context, w io.Writer, src Source, now time.Time, progress func(written int64)) (Manifest, error) {
	c, err := src.Checkpoint(ctx)
	if err != nil {
		return Manifest{}, err
	}
	defer func() { _ = c.Close() }()
	return WriteCheckpoint(ctx, w, c, now, progress)
}

// WriteCheckpoint is Write of a checkpoint already taken; it does not
// close c.
func WriteCheckpoint(ctx context.Context, w io.Writer, c *pebble.Checkpoint, now time.Time, progress func(written int64)) (Manifest, error) {
	m := Manifest{Format: Format, StyxVersion: Version(), StoreFormat: pebble.FormatVersion, CreatedAt: now.UTC()}
	tw := tar.NewWriter(w)
	all := sha256.New()
	buf := make([]byte, 256<<10)
	for _, f := range c.Files() {
		if err := ctx.Err(); err != nil {
			return m, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: storeDir + f.Name, Mode: 0o600, Size: f.Size, ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return m, fmt.Errorf("backup: write %s: %w", f.Name, err)
		}
		r, err := c.Open(f.Name)
		if err != nil {
			return m, fmt.Errorf("backup: read %s: %w", f.Name, err)
		}
		one := sha256.New()
		n, err := copyProgress(io.MultiWriter(tw, one, all), io.LimitReader(r, f.Size), buf, m.Bytes, progress)
		_ = r.Close()
		if err == nil && n != f.Size {
			err = fmt.Errorf("%d bytes of %d (the file shrank)", n, f.Size)
		}
		if err != nil {
			return m, fmt.Errorf("backup: copy %s: %w", f.Name, err)
		}
		m.Bytes += n
		m.Files = append(m.Files, File{Name: f.Name, Size: n, SHA256: hex.EncodeToString(one.Sum(nil))})
	}
	m.SHA256 = hex.EncodeToString(all.Sum(nil))
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: ManifestName, Mode: 0o600, Size: int64(len(b)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
		return m, fmt.Errorf("backup: write the manifest: %w", err)
	}
	if _, err := tw.Write(b); err != nil {
		return m, fmt.Errorf("backup: write the manifest: %w", err)
	}
	if err := tw.Close(); err != nil {
		return m, fmt.Errorf("backup: close the archive: %w", err)
	}
	return m, nil
}

// copyProgress copies r to w through buf, reporting base plus the bytes
// copied after each chunk.
func copyProgress(w io.Writer, r io.Reader, buf []byte, base int64, progress func(int64)) (int64, error) {
	var n int64
	for {
		k, err := r.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
			if progress != nil {
				progress(base + n)
			}
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// ErrInvalid wraps every reason Read refuses an archive: not a Styx backup,
// cut short (no manifest), a file whose size or checksum is not the
// manifest's, or another store format.
var ErrInvalid = errors.New("not a valid Styx backup")

// Read reads a backup archive from r, calling file with each store file's
// name and contents (file must read r to its end, or fail) and verifying
// every file, and the whole, against the manifest, which it returns. A
// file's contents are handed over before the manifest is read: a caller
// that wrote them keeps them only when Read returns nil. Errors wrap
// ErrInvalid when the archive is at fault.
func Read(r io.Reader, file func(name string, r io.Reader) error) (Manifest, error) {
	tr := tar.NewReader(r)
	all := sha256.New()
	var files []File
	var m Manifest
	seenManifest := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if seenManifest {
			return m, fmt.Errorf("%w: %s follows the manifest", ErrInvalid, h.Name)
		}
		switch {
		case h.Name == ManifestName:
			if h.Size > 64<<20 {
				return m, fmt.Errorf("%w: a manifest of %d bytes", ErrInvalid, h.Size)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return m, fmt.Errorf("%w: read the manifest: %v", ErrInvalid, err)
			}
			if err := json.Unmarshal(b, &m); err != nil {
				return m, fmt.Errorf("%w: the manifest: %v", ErrInvalid, err)
			}
			seenManifest = true
		case strings.HasPrefix(h.Name, storeDir) && h.Typeflag == tar.TypeReg:
			name := strings.TrimPrefix(h.Name, storeDir)
			if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
				return m, fmt.Errorf("%w: a file named %q", ErrInvalid, h.Name)
			}
			one := sha256.New()
			cr := &countingReader{r: io.TeeReader(tr, io.MultiWriter(one, all))}
			if err := file(name, cr); err != nil {
				return m, err
			}
			if _, err := io.Copy(io.Discard, cr); err != nil {
				return m, fmt.Errorf("%w: read %s: %v", ErrInvalid, name, err)
			}
			files = append(files, File{Name: name, Size: cr.n, SHA256: hex.EncodeToString(one.Sum(nil))})
		default:
			return m, fmt.Errorf("%w: unexpected entry %q", ErrInvalid, h.Name)
		}
	}
	if !seenManifest {
		return m, fmt.Errorf("%w: the archive has no manifest (it was cut short: the backup did not finish)", ErrInvalid)
	}
	return m, verify(m, files, all)
}

// verify checks what Read found against the manifest m.
func verify(m Manifest, files []File, all hash.Hash) error {
	if m.Format != Format {
		return fmt.Errorf("%w: format %q, this Styx reads %q", ErrInvalid, m.Format, Format)
	}
	if m.StoreFormat != pebble.FormatVersion {
		return fmt.Errorf("%w: store format %q, this Styx reads %q", ErrInvalid, m.StoreFormat, pebble.FormatVersion)
	}
	if len(files) != len(m.Files) {
		return fmt.Errorf("%w: %d files, the manifest lists %d", ErrInvalid, len(files), len(m.Files))
	}
	for i, f := range files {
		if f != m.Files[i] {
			return fmt.Errorf("%w: file %s (%d bytes, sha256 %s) is not the manifest's (%s, %d bytes, sha256 %s)",
				ErrInvalid, f.Name, f.Size, f.SHA256, m.Files[i].Name, m.Files[i].Size, m.Files[i].SHA256)
		}
	}
	if sum := hex.EncodeToString(all.Sum(nil)); sum != m.SHA256 {
		return fmt.Errorf("%w: checksum %s, the manifest says %s", ErrInvalid, sum, m.SHA256)
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}
