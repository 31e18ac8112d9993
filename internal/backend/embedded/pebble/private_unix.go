//go:build unix

package pebble

import (
	"os"
	"syscall"
)

// fileOwner returns the user id that owns the file described by fi.
func fileOwner(fi os.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
