package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	duh "github.com/duh-rpc/duh-go"
	v1 "github.com/duh-rpc/duh-go/proto/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/errclass"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// TestFailWritesTheClass: fail answers an error's class (internal/errclass)
// as a duh.v1.Reply, in JSON and in protobuf, with the HTTP status equal to
// the code and the reason in details.
func TestFailWritesTheClass(t *testing.T) {
	h := &Handler{cfg: Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	cases := []struct {
		err    error
		code   int
		reason errclass.Reason
		msg    string
	}{
		{store.Unavailable("queue 'q'", errors.New("sync: no space left on device")), 453, errclass.StorageUnavailable,
			"storage unavailable; queue 'q': sync: no space left on device"},
		{fmt.Errorf("x: %w", store.Conflict("postgres: commit", errors.New("deadlock"))), 454, errclass.StorageConflict,
			"storage conflict; postgres: commit: deadlock"},
		{apierr.Invalidf("invalid queue_name; '' must be 1..512 characters"), 400, errclass.InvalidArgument,
			"invalid queue_name; '' must be 1..512 characters"},
		{queue.NotFound("q"), 400, errclass.QueueNotFound, "queue does not exist; no such queue named 'q'"},
		{queue.ErrNoItems, 454, errclass.RequestTimeout, "request timeout; no items are in the queue, try again"},
		{apierr.New(apierr.Unauthorized, "unauthorized; no key"), 401, errclass.Unauthorized, "unauthorized; no key"},
		{fmt.Errorf("lease: %w", context.Canceled), 499, errclass.Canceled, "request canceled; the client went away"},
		{errors.New("boom"), 500, errclass.Internal, "internal error; see the server log"},
	}
	for _, c := range cases {
		for _, ct := range []string{duh.ContentTypeJSON, duh.ContentTypeProtoBuf} {
			t.Run(string(c.reason)+"/"+ct, func(t *testing.T) {
				r := httptest.NewRequest(http.MethodPost, "/v1/queue.produce", nil)
				r.Header.Set("Content-Type", ct)
				w := httptest.NewRecorder()
				h.fail(w, r, c.err)
				assert.Equal(t, c.code, w.Code)
				var got v1.Reply
				if ct == duh.ContentTypeJSON {
					require.NoError(t, protojson.Unmarshal(w.Body.Bytes(), &got))
				} else {
					require.NoError(t, proto.Unmarshal(w.Body.Bytes(), &got))
				}
				assert.Equal(t, int32(c.code), got.Code)
				assert.Equal(t, c.msg, got.Message)
				assert.Equal(t, map[string]string{"reason": string(c.reason)}, got.Details)
				if c.code == 401 {
					assert.NotEmpty(t, w.Header().Get("WWW-Authenticate"))
				}
			})
		}
	}
}

// TestRawReplies: the replies written without a proto message (an answer
// that could not be encoded, a connection there is no room for) are valid
// duh.v1.Reply JSON with their reason.
func TestRawReplies(t *testing.T) {
	for raw, want := range map[string]struct {
		code   int32
		reason errclass.Reason
	}{
		internalReplyJSON:   {500, errclass.Internal},
		overloadedReplyJSON: {503, errclass.Overloaded},
	} {
		var got v1.Reply
		require.NoError(t, protojson.Unmarshal([]byte(raw), &got), raw)
		assert.Equal(t, want.code, got.Code)
		assert.Equal(t, string(want.reason), got.Details[reasonDetail])
	}

	// An Accept the server cannot answer in: 455 with its reason.
	h := &Handler{cfg: Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	r := httptest.NewRequest(http.MethodPost, "/v1/queue.produce", nil)
	r.Header.Set("Accept", "text/html")
	w := httptest.NewRecorder()
	h.reply(w, r, 200, &v1.Reply{})
	var got v1.Reply
	require.NoError(t, protojson.Unmarshal(w.Body.Bytes(), &got))
	assert.Equal(t, 455, w.Code)
	assert.Equal(t, string(errclass.BadContent), got.Details[reasonDetail])
}
