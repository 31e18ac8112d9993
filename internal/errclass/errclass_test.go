package errclass_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/errclass"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/redrive"
	"github.com/styxq/styx/internal/store"
)

// sentinelCase is one sentinel as the server builds its error: the
// apierr.Error the domain wraps it in, or the bare storage sentinel.
type sentinelCase struct {
	name   string // package.Name, as declared
	err    error
	code   apierr.Code
	reason errclass.Reason
}

func sentinelCases() []sentinelCase {
	wrap := func(s error, code apierr.Code) error { return apierr.Wrap(s, code, "what; detail") }
	return []sentinelCase{
		{"store.ErrUnavailable", store.ErrUnavailable, 453, errclass.StorageUnavailable},
		{"store.ErrConflict", store.ErrConflict, 454, errclass.StorageConflict},
		{"store.ErrClosed", store.ErrClosed, 453, errclass.StorageUnavailable},
		{"store.ErrQueueNotFound", store.ErrQueueNotFound, 400, errclass.QueueNotFound},
		{"store.ErrQueueExists", store.ErrQueueExists, 400, errclass.QueueExists},
		{"store.ErrKeyNotFound", store.ErrKeyNotFound, 404, errclass.NotFound},
		{"store.ErrKeyExists", store.ErrKeyExists, 409, errclass.Conflict},

		{"queue.ErrQueueNotFound", queue.NotFound("q"), 400, errclass.QueueNotFound},
		{"queue.ErrQueueExists", queue.Exists("q"), 400, errclass.QueueExists},
		{"queue.ErrNotLeased", wrap(queue.ErrNotLeased, apierr.Invalid), 400, errclass.NotLeased},
		{"queue.ErrDuplicateID", wrap(queue.ErrDuplicateID, apierr.Invalid), 400, errclass.InvalidArgument},
		{"queue.ErrNotDeadLetterQueue", wrap(queue.ErrNotDeadLetterQueue, apierr.Invalid), 400, errclass.NotDeadLetterQueue},
		{"queue.ErrDeadQueueNotFound", wrap(queue.ErrDeadQueueNotFound, apierr.Invalid), 400, errclass.DeadQueueNotFound},
		{"queue.ErrMaxAttempts", wrap(queue.ErrMaxAttempts, apierr.Invalid), 400, errclass.InvalidArgument},
		{"queue.ErrRedriveAllowPolicy", wrap(queue.ErrRedriveAllowPolicy, apierr.Invalid), 400, errclass.InvalidArgument},
		{"queue.ErrMatchedChanged", wrap(queue.ErrMatchedChanged, apierr.Conflict), 409, errclass.MatchedChanged},
		{"queue.ErrNoItems", queue.ErrNoItems, 454, errclass.RequestTimeout},
		{"queue.ErrProduceTimeout", wrap(queue.ErrProduceTimeout, apierr.Unavailable), 453, errclass.ProduceTimeout},
		{"queue.ErrDeduplicationLimit", queue.DeduplicationLimitError("q", 10, 0), 454, errclass.DeduplicationLimit},
		{"queue.ErrQueueMoving", wrap(queue.ErrQueueMoving, apierr.Unavailable), 453, errclass.QueueMoving},
		{"queue.ErrUnknownCluster", queue.CheckCluster("nowhere", []string{"main"}), 400, errclass.InvalidArgument},

		{"redrive.ErrTaskEnded", wrap(redrive.ErrTaskEnded, apierr.Conflict), 409, errclass.TaskEnded},
		{"redrive.ErrDestinationIsQueue", wrap(redrive.ErrDestinationIsQueue, apierr.Invalid), 400, errclass.InvalidArgument},
		{"redrive.ErrDestinationNotFound", wrap(redrive.ErrDestinationNotFound, apierr.Invalid), 400, errclass.DestinationNotFound},
		{"redrive.ErrRateLimit", wrap(redrive.ErrRateLimit, apierr.Invalid), 400, errclass.InvalidArgument},
		{"redrive.ErrMaxRedriveCount", wrap(redrive.ErrMaxRedriveCount, apierr.Invalid), 400, errclass.InvalidArgument},
		{"redrive.ErrCanary", wrap(redrive.ErrCanary, apierr.Invalid), 400, errclass.InvalidArgument},
		{"redrive.ErrCanaryTimeout", wrap(redrive.ErrCanaryTimeout, apierr.Invalid), 400, errclass.InvalidArgument},

		{"auth.ErrKeyRevoked", auth.ErrKeyRevoked, 401, errclass.KeyRevoked},
		{"engine.ErrShuttingDown", engine.ErrShuttingDown, 454, errclass.Retry},
		{"engine.ErrNoItems", engine.ErrNoItems, 454, errclass.RequestTimeout},
	}
}

// TestSentinels: every sentinel maps to its code and reason, as built,
// and wrapped by a caller's fmt.Errorf.
func TestSentinels(t *testing.T) {
	for _, c := range sentinelCases() {
		t.Run(c.name, func(t *testing.T) {
			got := errclass.Of(c.err)
			assert.Equal(t, c.code, got.Code)
			assert.Equal(t, c.reason, got.Reason)
			assert.NotEmpty(t, got.Message)
			wrapped := errclass.Of(fmt.Errorf("op %q: %w", "x", c.err))
			assert.Equal(t, c.code, wrapped.Code, "wrapped")
			assert.Equal(t, c.reason, wrapped.Reason, "wrapped")
		})
	}
}

// TestEverySentinelHasACase: each exported Err… variable of the packages
// whose errors reach the doors has a case in sentinelCases, so a new
// sentinel cannot go unclassified unnoticed.
func TestEverySentinelHasACase(t *testing.T) {
	var names []string
	for _, c := range sentinelCases() {
		names = append(names, c.name)
	}
	for _, dir := range []string{"store", "queue", "redrive", "auth", "engine"} {
		files, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
			require.NoError(t, err)
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, s := range g.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						if strings.HasPrefix(n.Name, "Err") && n.IsExported() {
							assert.Contains(t, names, dir+"."+n.Name, "a sentinel without a case in sentinelCases")
						}
					}
				}
			}
		}
	}
}

// TestCodes: an apierr.Error without a sentinel keeps its code and
// message, and gets its code's reason.
func TestCodes(t *testing.T) {
	cases := []struct {
		code   apierr.Code
		reason errclass.Reason
	}{
		{apierr.Invalid, errclass.InvalidArgument},
		{apierr.Unauthorized, errclass.Unauthorized},
		{apierr.Forbidden, errclass.Forbidden},
		{apierr.NotFound, errclass.NotFound},
		{apierr.RequestTimeout, errclass.BodyTimeout},
		{apierr.Conflict, errclass.Conflict},
		{apierr.Unavailable, errclass.StorageUnavailable},
		{apierr.Retry, errclass.Retry},
		{apierr.BadContent, errclass.BadContent},
		{apierr.Canceled, errclass.Canceled},
		{apierr.Internal, errclass.Internal},
		{apierr.NotImplemented, errclass.Unimplemented},
		{apierr.Overloaded, errclass.Overloaded},
		{429, errclass.Unknown},
	}
	for _, c := range cases {
		got := errclass.Of(fmt.Errorf("ctx: %w", apierr.New(c.code, "what; %d", c.code)))
		assert.Equal(t, errclass.Class{Code: c.code, Reason: c.reason, Message: fmt.Sprintf("what; %d", c.code)}, got)
	}
	// A SigV4 refusal is Unauthorized on /v1 (the SQS door names its
	// AWS error itself).
	assert.Equal(t, errclass.Unauthorized, errclass.Of(&auth.SigV4Error{Code: "SignatureDoesNotMatch", Message: "m"}).Reason)
}

// TestStorageMessages: a storage failure's message is built from its
// store.Error ("<kind>; <where>: <cause>"), a bare sentinel's from its
// table row ("<what>; <error>"); the kind wins over any sentinel or
// context in the cause's chain; an apierr wins over a store sentinel.
func TestStorageMessages(t *testing.T) {
	unavailable := store.Unavailable("queue 'q'", errors.New("sync: no space left on device"))
	assert.Equal(t, errclass.Class{Code: 453, Reason: errclass.StorageUnavailable,
		Message: "storage unavailable; queue 'q': sync: no space left on device"}, errclass.Of(unavailable))

	// Context a caller wraps a classified failure in is not repeated
	// before its kind: the message is the store.Error's own.
	conflict := store.Conflict("postgres: queue 'q': commit", errors.New("deadlock detected (40P01), retry"))
	assert.Equal(t, errclass.Class{Code: 454, Reason: errclass.StorageConflict,
		Message: "storage conflict; postgres: queue 'q': commit: deadlock detected (40P01), retry"},
		errclass.Of(fmt.Errorf("sync: %w", conflict)))

	got := errclass.Of(fmt.Errorf("pebble: op %q: %w", "x", store.ErrQueueNotFound))
	assert.Equal(t, `queue does not exist; pebble: op "x": queue not found`, got.Message)
	assert.Equal(t, "storage unavailable; store closed", errclass.Of(store.ErrClosed).Message)

	assert.Equal(t, errclass.StorageUnavailable, errclass.Of(store.Unavailable("queue 'q'", fmt.Errorf("write: %w", store.ErrQueueNotFound))).Reason)
	assert.Equal(t, errclass.StorageUnavailable, errclass.Of(store.Unavailable("postgres: stats", context.DeadlineExceeded)).Reason)
	assert.Equal(t, errclass.StorageConflict, errclass.Of(store.Conflict("postgres: commit", context.Canceled)).Reason)
	// Classified once: a second classification keeps the first.
	assert.Same(t, unavailable, store.Conflict("other", unavailable))

	assert.Equal(t, apierr.Invalid, errclass.Of(apierr.Wrap(store.ErrUnavailable, apierr.Invalid, "invalid x; y")).Code)
}

// TestOthers: a client that went away is 499, anything else 500 without
// detail.
func TestOthers(t *testing.T) {
	for _, err := range []error{context.Canceled, fmt.Errorf("lease: %w", context.DeadlineExceeded)} {
		assert.Equal(t, errclass.Class{Code: 499, Reason: errclass.Canceled, Message: "request canceled; the client went away"}, errclass.Of(err))
	}
	got := errclass.Of(errors.New("boom: secret detail"))
	assert.Equal(t, errclass.Class{Code: 500, Reason: errclass.Internal, Message: "internal error; see the server log"}, got)
	assert.True(t, got.Internal())
	assert.False(t, errclass.Of(context.Canceled).Internal())
}

var reasonWord = regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)

// TestReasons: the reasons are distinct snake_case words, each reached by
// a case above, and each has its row in docs/wire-contract.md's table.
func TestReasons(t *testing.T) {
	reached := map[errclass.Reason]bool{errclass.Canceled: true, errclass.Internal: true, errclass.Unknown: true}
	for _, c := range sentinelCases() {
		reached[c.reason] = true
	}
	for _, code := range []apierr.Code{400, 401, 403, 404, 408, 409, 453, 454, 455, 501, 503} {
		reached[errclass.Of(apierr.New(code, "x")).Reason] = true
	}
	doc, err := os.ReadFile("../../docs/wire-contract.md")
	require.NoError(t, err)
	var seen []errclass.Reason
	for _, r := range errclass.Reasons() {
		assert.Regexp(t, reasonWord, string(r))
		assert.NotContains(t, seen, r, "twice")
		seen = append(seen, r)
		assert.True(t, reached[r], "%s: no case reaches it", r)
		assert.True(t, strings.Contains(string(doc), "| `"+string(r)+"` |"), "%s: no row in docs/wire-contract.md", r)
	}
}
