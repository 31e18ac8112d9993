package transport

import (
	"errors"
	"strings"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/store"
)

// storageCodes is the one mapping from the storage sentinels (package
// internal/store) to API codes, beside status, the error → status table.
// The first entry err's chain matches wins, so a classified failure (kind
// ErrUnavailable or ErrConflict) is answered by its kind whatever its
// cause. what starts the client message ("<what>; <detail>"), moved to the
// front when the error's message has it further in.
var storageCodes = []struct {
	err  error
	code apierr.Code
	what string
}{
	{store.ErrUnavailable, apierr.Unavailable, "storage unavailable"},
	{store.ErrConflict, apierr.Retry, "storage conflict"},
	{store.ErrClosed, apierr.Unavailable, "storage unavailable"},
	{store.ErrQueueNotFound, apierr.Invalid, "queue does not exist"},
	{store.ErrQueueExists, apierr.Invalid, "queue already exists"},
	{store.ErrKeyNotFound, apierr.NotFound, "api key not found"},
	{store.ErrKeyExists, apierr.Conflict, "api key already exists"},
}

// storageStatus returns the code and client message of a storage error,
// and false when err's chain holds no storage sentinel.
func storageStatus(err error) (int, string, bool) {
	for _, c := range storageCodes {
		if errors.Is(err, c.err) {
			msg := err.Error()
			if !strings.HasPrefix(msg, c.what+";") {
				// "queue 'q': storage conflict; postgres: ..." reads
				// "storage conflict; queue 'q': postgres: ...".
				msg = c.what + "; " + strings.Replace(msg, c.what+"; ", "", 1)
			}
			return int(c.code), msg, true
		}
	}
	return 0, "", false
}
