//go:build !unix

package pebble

import "os"

// fileOwner is unknown here: privateDir tries the chmod.
func fileOwner(os.FileInfo) (uid int, ok bool) { return 0, false }
