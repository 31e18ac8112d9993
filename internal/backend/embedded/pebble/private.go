package pebble

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Modes of what the store keeps on disk (issue 36): only the server's user
// may read the items.
const (
	privateFileMode fs.FileMode = 0o600
	privateDirMode  fs.FileMode = 0o700
)

// privateFS is the filesystem the store gives Pebble, beneath faultFS (so a
// failure to set a mode is reported like a failed creation). On the disk,
// every file it creates or opens for writing (the log, sstables, blob files,
// MANIFEST, OPTIONS, the markers, LOCK) is set to mode 0600 and every
// directory it creates to 0700, whatever the process's umask: the file is
// created as the filesystem underneath creates it (0666 less the umask) and
// chmodded by name at once. Nobody else can open it in between, because the
// data directory is 0700 before Pebble starts (privateDir).
//
// On any other filesystem (in memory, or a Config.FS that does not wrap
// vfs.Default) it only passes 0700 to MkdirAll: modes mean nothing there.
// It wraps Config.FS, so the errorfs and crashable in-memory filesystems of
// the fault-injection tests stay underneath and see every call.
type privateFS struct {
	vfs.FS
	// disk is set when the filesystem underneath is the disk: vfs.Default,
	// possibly wrapped (errorfs.Wrap(vfs.Default, ...)).
	disk bool
}

func newPrivateFS(fs vfs.FS) privateFS { return privateFS{FS: fs, disk: onDisk(fs)} }

// onDisk reports whether fs is vfs.Default or wraps it.
func onDisk(fs vfs.FS) bool {
	for fs != nil {
		if fs == vfs.Default {
			return true
		}
		fs = fs.Unwrap()
	}
	return false
}

// private sets the mode of the file name, just created or opened as c; on
// failure it closes c and returns the error.
func (fs privateFS) private(name string, c io.Closer) error {
	if !fs.disk {
		return nil
	}
	if err := os.Chmod(name, privateFileMode); err != nil {
		_ = c.Close()
		return fmt.Errorf("make %s private: %w", name, err)
	}
	return nil
}

func (fs privateFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil {
		return f, err
	}
	if err := fs.private(name, f); err != nil {
		return nil, err
	}
	return f, nil
}

// OpenReadWrite creates the file if it is missing; an existing one (left
// 0644 by an earlier version) is tightened too.
func (fs privateFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	if err != nil {
		return f, err
	}
	if err := fs.private(name, f); err != nil {
		return nil, err
	}
	return f, nil
}

// ReuseForWrite renames a log file Pebble recycles, which an earlier
// version may have created 0644.
func (fs privateFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	if err != nil {
		return f, err
	}
	if err := fs.private(newname, f); err != nil {
		return nil, err
	}
	return f, nil
}

// Lock creates the lock file (LOCK) 0600 too.
func (fs privateFS) Lock(name string) (io.Closer, error) {
	l, err := fs.FS.Lock(name)
	if err != nil {
		return l, err
	}
	if err := fs.private(name, l); err != nil {
		return nil, err
	}
	return l, nil
}

// MkdirAll creates dir and its missing parents 0700, whatever perm says
// (Pebble asks for 0755).
func (fs privateFS) MkdirAll(dir string, _ os.FileMode) error {
	if !fs.disk {
		return fs.FS.MkdirAll(dir, privateDirMode)
	}
	missing := missingDirs(dir)
	if err := fs.FS.MkdirAll(dir, privateDirMode); err != nil {
		return err
	}
	// MkdirAll's mode is less the umask: set it.
	for _, d := range missing {
		if err := os.Chmod(d, privateDirMode); err != nil {
			return fmt.Errorf("make %s private: %w", d, err)
		}
	}
	return nil
}

// Unwrap returns the wrapped filesystem.
func (fs privateFS) Unwrap() vfs.FS { return fs.FS }

// missingDirs returns dir and those of its parents that do not exist, on
// the disk.
func missingDirs(dir string) []string {
	var out []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			return out
		}
		out = append(out, d)
		if filepath.Dir(d) == d {
			return out
		}
	}
}

// privateDir makes the data directory dir the server's user's alone before
// Pebble opens it (issue 36). PostgreSQL refuses to start on a data
// directory that group or others may access; Styx tightens its own and
// refuses any other:
//
//   - a missing directory is created 0700, with any missing parent;
//   - an existing one that group or others may access (any bit of 0o077) is
//     chmodded to 0700, with a warning naming the mode it had, when it
//     belongs to the server's user and is empty or holds a Pebble store
//     (LOCK, MANIFEST-*, OPTIONS-*, marker.*). Otherwise, or when the chmod
//     fails, Open fails naming the path, the mode and the chmod to run: a
//     directory of another user's, or one that holds something else (the
//     server pointed at /tmp or a home directory), is the operator's to fix;
//   - in a Pebble store, every regular file at the top level that group or
//     others may access (an earlier version created them 0644) is chmodded
//     to 0600, and every subdirectory to 0700, with one warning.
//
// A directory mode 0700 that belongs to another user is left alone (Pebble
// fails if it cannot write it).
func privateDir(dir string, log *slog.Logger) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return newPrivateFS(vfs.Default).MkdirAll(dir, privateDirMode)
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("the data directory %s is not a directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	store := isPebbleStore(entries)
	if mode := st.Mode().Perm(); mode&0o077 != 0 {
		refuse := func(why string) error {
			return fmt.Errorf("the data directory %s is mode %#o: group or other users may read the items in it, and %s; "+
				"run `chmod 700 %s` (Styx makes its files 0600 and its directories 0700)", dir, mode, why, dir)
		}
		switch uid, ok := fileOwner(st); {
		case ok && uid != os.Geteuid():
			return refuse(fmt.Sprintf("it belongs to user %d, not to this server's user (%d), so Styx leaves it alone", uid, os.Geteuid()))
		case !store && len(entries) > 0:
			return refuse("it holds files that are not a Styx store, so Styx leaves it alone")
		}
		if err := os.Chmod(dir, privateDirMode); err != nil {
			return refuse(fmt.Sprintf("Styx could not tighten it: %v", err))
		}
		log.Warn("the data directory was open to other users: made it 0700", "dir", dir, "was", fmt.Sprintf("%#o", mode))
	}
	if !store {
		return nil
	}
	tightened := 0
	for _, e := range entries {
		want := privateFileMode
		switch {
		case e.IsDir():
			want = privateDirMode
		case !e.Type().IsRegular():
			continue // a symlink or device: not Pebble's
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted meanwhile by a server that holds the store
		} else if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 == 0 {
			continue
		}
		name := filepath.Join(dir, e.Name())
		if err := os.Chmod(name, want); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s in the data directory is mode %#o: other users may read the items in it, and Styx could not "+
				"tighten it (%v); run `chmod %o %s`", name, info.Mode().Perm(), err, want, name)
		}
		tightened++
	}
	if tightened > 0 {
		log.Warn("files in the data directory were open to other users (an earlier version created them 0644): made them 0600",
			"dir", dir, "files", tightened)
	}
	return nil
}

// isPebbleStore reports whether the entries of a directory are those of a
// Pebble store.
func isPebbleStore(entries []os.DirEntry) bool {
	for _, e := range entries {
		n := e.Name()
		if n == "LOCK" || n == "CURRENT" || strings.HasPrefix(n, "MANIFEST-") || strings.HasPrefix(n, "OPTIONS-") ||
			strings.HasPrefix(n, "marker.") {
			return true
		}
	}
	return false
}
