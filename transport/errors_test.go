package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/store"
)

// TestStorageCodes: every storage sentinel maps to its API code, bare,
// wrapped by a backend's fmt.Errorf, or classified as a store.Error; the
// message keeps the cause and starts "<what>; ".
func TestStorageCodes(t *testing.T) {
	cases := []struct {
		err  error
		code int
		what string
	}{
		{store.ErrUnavailable, 453, "storage unavailable"},
		{store.ErrConflict, 454, "storage conflict"},
		{store.ErrClosed, 453, "storage unavailable"},
		{store.ErrQueueNotFound, 400, "queue does not exist"},
		{store.ErrQueueExists, 400, "queue already exists"},
		{store.ErrKeyNotFound, 404, "api key not found"},
		{store.ErrKeyExists, 409, "api key already exists"},
	}
	require.Len(t, storageCodes, len(cases), "a sentinel without a case here")
	for _, c := range cases {
		t.Run(c.err.Error(), func(t *testing.T) {
			code, msg := status(c.err)
			assert.Equal(t, c.code, code)
			assert.Regexp(t, "^"+c.what+"; ", msg)

			wrapped := fmt.Errorf("pebble: op %q: %w", "x", c.err)
			code, msg = status(wrapped)
			assert.Equal(t, c.code, code)
			assert.Contains(t, msg, `pebble: op "x": `+c.err.Error())
		})
	}

	unavailable := store.Unavailable("queue 'q'", errors.New("sync: no space left on device"))
	code, msg := status(unavailable)
	assert.Equal(t, 453, code)
	assert.Equal(t, "storage unavailable; queue 'q': sync: no space left on device", msg)

	conflict := store.Conflict("postgres: commit", errors.New("deadlock detected (40P01), retry"))
	code, msg = status(fmt.Errorf("queue 'q': %w", conflict))
	assert.Equal(t, 454, code)
	assert.Equal(t, "storage conflict; queue 'q': postgres: commit: deadlock detected (40P01), retry", msg)

	// The kind wins over any sentinel or context in the cause's chain.
	code, _ = status(store.Unavailable("queue 'q'", fmt.Errorf("write: %w", store.ErrQueueNotFound)))
	assert.Equal(t, 453, code)
	code, _ = status(store.Unavailable("postgres: stats", context.DeadlineExceeded))
	assert.Equal(t, 453, code)
	// Classified once: a second classification keeps the first.
	assert.Same(t, unavailable, store.Conflict("other", unavailable))
	require.ErrorIs(t, unavailable, store.ErrUnavailable)
}

// TestStatusTable: apierr values keep their code and message, a client
// that went away is 499, anything else 500 without detail.
func TestStatusTable(t *testing.T) {
	code, msg := status(fmt.Errorf("ctx: %w", apierr.New(apierr.Retry, "request timeout; none")))
	assert.Equal(t, 454, code)
	assert.Equal(t, "request timeout; none", msg)
	// An apierr is the answer even with a storage sentinel in its message's
	// origin (it does not wrap it).
	code, _ = status(apierr.Invalidf("queue does not exist; no such queue named 'q'"))
	assert.Equal(t, 400, code)
	code, _ = status(fmt.Errorf("lease: %w", context.Canceled))
	assert.Equal(t, 499, code)
	code, msg = status(errors.New("boom"))
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.Equal(t, "internal error; see the server log", msg)
}
