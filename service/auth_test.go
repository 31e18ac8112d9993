package service_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	v1 "github.com/duh-rpc/duh-go/proto/v1"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// Authentication and scoped API keys (issue 11, internal/auth,
// docs/security.md), through the Go client over HTTP on every backend.

// raw posts body (JSON unless ct says otherwise) to path with the given
// Authorization header value (none when empty) and returns the status,
// the Content-Type and the body.
func raw(s *servertest.Server, method, path, ct, authz string, body []byte) (int, string, []byte) {
	s.T.Helper()
	req, err := http.NewRequestWithContext(ctx, method, s.D.Endpoint()+path, bytes.NewReader(body))
	require.NoError(s.T, err)
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, b := do(s, req)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// do sends req and returns the response, its body read.
func do(s *servertest.Server, req *http.Request) (*http.Response, []byte) {
	s.T.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.T, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.T, err)
	return resp, b
}

// metricsErr scrapes /metrics with key and returns nil on 200, else an
// *styx.Error decoded from the JSON reply.
func metricsErr(s *servertest.Server, key string) error {
	authz := ""
	if key != "" {
		authz = "Bearer " + key
	}
	code, _, body := raw(s, http.MethodGet, "/metrics", "", authz, nil)
	if code == http.StatusOK {
		return nil
	}
	var reply v1.Reply
	require.NoError(s.T, protojson.Unmarshal(body, &reply), string(body))
	return &styx.Error{Code: int(reply.Code), Message: reply.Message}
}

// call is one API call made with a client, and the scope it needs.
type call struct {
	name  string
	scope string
	do    func(c *styx.Client) error
}

// calls returns every call of the API, on queue "orders" (dead-letter
// queue "orders-dead"). Calls that would change shared state use names of
// their own (n makes them unique).
func calls(s *servertest.Server) []call {
	var n atomic.Int64
	uniq := func(p string) string { return fmt.Sprint(p, n.Add(1)) }
	q := "orders"
	return []call{
		{"queue.produce", "produce", func(c *styx.Client) error {
			return c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: q, Items: []*pb.QueueProduceItem{{Bytes: []byte("x")}}})
		}},
		{"queue.lease", "consume", func(c *styx.Client) error {
			_, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: q, BatchSize: 1, ClientId: uniq("c"), RequestTimeout: "20ms"})
			if styx.IsRetry(err) {
				return nil
			}
			return err
		}},
		{"queue.complete", "consume", func(c *styx.Client) error {
			return c.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: q, Ids: []string{"0000000000000"}})
		}},
		{"queue.retry", "consume", func(c *styx.Client) error {
			_, err := c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: q, Items: []*pb.QueueRetryItem{{Id: "0000000000000"}}})
			return err
		}},
		{"queue.renew", "consume", func(c *styx.Client) error {
			_, err := c.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: q, Ids: []string{"0000000000000"}})
			return err
		}},
		{"dead.list", "dead", func(c *styx.Client) error {
			_, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: q + "-dead"})
			return err
		}},
		{"dead.delete", "dead", func(c *styx.Client) error {
			_, err := c.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: q + "-dead", Filter: &pb.DeadFilter{Kind: "none"}})
			return err
		}},
		{"dead.redrive", "dead", func(c *styx.Client) error {
			_, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: q + "-dead", DryRun: true})
			return err
		}},
		{"dead.groups", "dead", func(c *styx.Client) error {
			_, err := c.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: q + "-dead"})
			return err
		}},
		{"redrives.list", "dead", func(c *styx.Client) error {
			_, err := c.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: q + "-dead"})
			return err
		}},
		{"redrives.get", "dead", func(c *styx.Client) error {
			_, err := c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: "rd-none"})
			return err
		}},
		{"redrives.cancel", "dead", func(c *styx.Client) error {
			_, err := c.RedrivesCancel(ctx, &pb.RedriveTaskRequest{TaskId: "rd-none"})
			return err
		}},
		{"queue.stats", "read", func(c *styx.Client) error {
			_, err := c.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: q})
			return err
		}},
		{"queues.info", "read", func(c *styx.Client) error {
			_, err := c.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: q})
			return err
		}},
		{"queues.list", "read", func(c *styx.Client) error {
			_, err := c.QueuesList(ctx, &pb.QueuesListRequest{})
			return err
		}},
		{"storage/items.list", "read", func(c *styx.Client) error {
			_, err := c.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: q})
			return err
		}},
		{"storage/scheduled.list", "read", func(c *styx.Client) error {
			_, err := c.StorageScheduledList(ctx, &pb.StorageItemsListRequest{QueueName: q})
			return err
		}},
		{"metrics", "read", func(c *styx.Client) error { return nil }}, // replaced in the test
		{"queues.create", "admin", func(c *styx.Client) error {
			return c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: uniq("new-")})
		}},
		{"queues.update", "admin", func(c *styx.Client) error {
			return c.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: q, Reference: uniq("r")})
		}},
		{"queues.delete", "admin", func(c *styx.Client) error {
			return c.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: uniq("none-")})
		}},
		{"queues.move", "admin", func(c *styx.Client) error {
			_, err := c.QueuesMove(ctx, &pb.QueuesMoveRequest{QueueName: q, Cluster: "other"})
			return err // 400 naming cluster: no clusters to move between
		}},
		{"queue.clear", "admin", func(c *styx.Client) error {
			return c.QueueClear(ctx, &pb.QueueClearRequest{QueueName: q, Scheduled: true})
		}},
		{"queue.reload", "admin", func(c *styx.Client) error {
			return c.QueueReload(ctx, &pb.QueueReloadRequest{QueueName: q})
		}},
		{"storage/items.import", "admin", func(c *styx.Client) error {
			_, err := c.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: q, Items: []*pb.StorageItem{{Payload: []byte("i")}}})
			return err
		}},
		{"storage/items.delete", "admin", func(c *styx.Client) error {
			return c.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{QueueName: q, Ids: []string{"0000000000000"}})
		}},
		{"keys.create", "admin", func(c *styx.Client) error {
			_, err := c.KeysCreate(ctx, &pb.KeysCreateRequest{Name: uniq("k"), Scopes: []string{"read"}})
			return err
		}},
		{"keys.list", "admin", func(c *styx.Client) error {
			_, err := c.KeysList(ctx, &pb.KeysListRequest{})
			return err
		}},
		{"keys.delete", "admin", func(c *styx.Client) error {
			return c.KeysDelete(ctx, &pb.KeysDeleteRequest{Name: uniq("none-")})
		}},
	}
}

// TestAuthScopeMatrix makes every call with a key of each scope: the
// call's own scope and admin pass the check (whatever the call then
// answers), every other scope gets 403 naming the scope that was missing.
func TestAuthScopeMatrix(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "orders-dead"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "orders", DeadQueue: "orders-dead"})
		keys := map[string]string{}
		for _, scope := range []string{"produce", "consume", "dead", "read", "admin"} {
			keys[scope] = s.NewKey("k-"+scope, []string{scope})
		}
		allowed, denied := map[string]int{}, map[string]int{}
		for _, c := range calls(s) {
			for scope, key := range keys {
				var err error
				if c.name == "metrics" {
					err = metricsErr(s, key)
				} else {
					err = c.do(s.Client(key))
				}
				code := styx.ErrorCode(err)
				if scope == c.scope || scope == "admin" {
					assert.NotContains(t, []int{401, 403}, code, "%s with a %s key: %v", c.name, scope, err)
					allowed[c.name]++
				} else {
					if assert.Equal(t, styx.CodeForbidden, code, "%s with a %s key: %v", c.name, scope, err) {
						assert.Contains(t, err.Error(), "lacks scope '"+c.scope+"'", c.name)
					}
					denied[c.name]++
				}
			}
		}
		for _, c := range calls(s) {
			assert.Positive(t, allowed[c.name], "%s allowed at least once", c.name)
			assert.Positive(t, denied[c.name], "%s denied at least once", c.name)
		}
		// Without a key, every call is 401.
		for _, c := range calls(s) {
			var err error
			if c.name == "metrics" {
				err = metricsErr(s, "")
			} else {
				err = c.do(s.Client(""))
			}
			servertest.RequireCode(t, err, styx.CodeUnauthorized, "no API key")
		}
	})
}

// TestAuthAnswers checks the 401 and 403 bodies (DUH-RPC replies, as every
// error), that neither depends on whether the queue exists, that /health
// and the UI's assets stay open, and the header forms refused.
func TestAuthAnswers(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, admin := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "orders-eu"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "billing"})
		key := s.NewKey("orders-only", []string{"produce"}, "orders*")

		body := []byte(`{"queue_name":"billing","items":[{"utf8":"x"}]}`)
		missing := []byte(`{"queue_name":"no-such-queue","items":[{"utf8":"x"}]}`)
		for _, tc := range []struct{ name, authz, message string }{
			{"NoHeader", "", "unauthorized; no API key, send the header 'Authorization: Bearer <key>'"},
			{"Basic", "Basic dXNlcjpwYXNz", "unauthorized; malformed Authorization header: the scheme must be Bearer; send 'Authorization: Bearer <key>'"},
			{"NoKey", "Bearer ", "unauthorized; malformed Authorization header: no key after Bearer; send 'Authorization: Bearer <key>'"},
			{"BadChars", "Bearer a b", "unauthorized; malformed Authorization header: the key has characters a bearer token may not hold; send 'Authorization: Bearer <key>'"},
			{"UnknownKey", "Bearer styx_0123456789abcdef_" + strings.Repeat("0", 64), "unauthorized; unknown API key (never created, or deleted)"},
			{"WrongSecret", "Bearer " + key[:len(key)-4] + "ffff", "unauthorized; unknown API key (never created, or deleted)"},
			{"NotAKey", "Bearer " + strings.Repeat("x", 40), "unauthorized; unknown API key (never created, or deleted)"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, ct, got := raw(s, http.MethodPost, "/v1/queue.produce", "application/json", tc.authz, body)
				require.Equal(t, http.StatusUnauthorized, code, string(got))
				require.Equal(t, "application/json", ct)
				want := fmt.Sprintf(`{"code":401,"code_text":"Unauthorized","message":%q,"details":{"reason":"unauthorized"}}`, tc.message)
				require.JSONEq(t, want, string(got))
				_, _, other := raw(s, http.MethodPost, "/v1/queue.produce", "application/json", tc.authz, missing)
				require.Equal(t, string(got), string(other), "a queue that does not exist gets the same answer")
			})
		}
		t.Run("Forbidden", func(t *testing.T) {
			code, _, got := raw(s, http.MethodPost, "/v1/queue.produce", "application/json", "Bearer "+key, body)
			require.Equal(t, http.StatusForbidden, code)
			require.JSONEq(t, `{"code":403,"code_text":"Forbidden","message":"forbidden; key 'orders-only' has scope 'produce' only for queues 'orders*', not for 'billing', which /v1/queue.produce needs","details":{"reason":"forbidden"}}`, string(got))
			code, _, got = raw(s, http.MethodPost, "/v1/queue.produce", "application/json", "Bearer "+key, missing)
			require.Equal(t, http.StatusForbidden, code)
			require.JSONEq(t, `{"code":403,"code_text":"Forbidden","message":"forbidden; key 'orders-only' has scope 'produce' only for queues 'orders*', not for 'no-such-queue', which /v1/queue.produce needs","details":{"reason":"forbidden"}}`, string(got))
			// The scope is checked before the body is read.
			code, _, got = raw(s, http.MethodPost, "/v1/dead.list", "application/json", "Bearer "+key, []byte(`not json`))
			require.Equal(t, http.StatusForbidden, code)
			require.JSONEq(t, `{"code":403,"code_text":"Forbidden","message":"forbidden; key 'orders-only' lacks scope 'dead', which /v1/dead.list needs","details":{"reason":"forbidden"}}`, string(got))
			code, _, got = raw(s, http.MethodPost, "/v1/dead.list", "application/json", "", []byte(`not json`))
			require.Equal(t, http.StatusUnauthorized, code, "no key: 401 before the body is read")
			require.Contains(t, string(got), "no API key")
		})
		t.Run("Open", func(t *testing.T) {
			code, _, got := raw(s, http.MethodGet, "/health", "", "", nil)
			require.Equal(t, http.StatusOK, code, string(got))
			require.Equal(t, styx.CodeUnauthorized, styx.ErrorCode(metricsErr(s, "")))
			require.NoError(t, metricsErr(s, admin))
		})
		t.Run("QueratorHeaderFormat", func(t *testing.T) {
			// Querator's Go client: protobuf body, no Accept, and
			// "Authorization: Bearer <key>" from ClientConfig.APIKey.
			in, err := proto.Marshal(&pb.QueueProduceRequest{QueueName: "orders-eu", RequestTimeout: "1m", Items: []*pb.QueueProduceItem{{Bytes: []byte("q")}}})
			require.NoError(t, err)
			code, ct, got := raw(s, http.MethodPost, "/v1/queue.produce", "application/protobuf", "Bearer "+key, in)
			require.Equal(t, http.StatusOK, code, string(got))
			require.Equal(t, "application/protobuf", ct)
			var ok pb.QueueProduceResponse
			require.NoError(t, proto.Unmarshal(got, &ok))
			code, ct, got = raw(s, http.MethodPost, "/v1/queue.produce", "application/protobuf", "", in)
			require.Equal(t, http.StatusUnauthorized, code)
			require.Equal(t, "application/protobuf", ct)
			var reply v1.Reply
			require.NoError(t, proto.Unmarshal(got, &reply))
			require.Equal(t, int32(401), reply.Code)
			require.Len(t, s.Items("orders-eu"), 1)
		})
	})
}

// TestAuthUIAssetsOpen checks the hook for the web UI: its static assets
// under /ui/ need no key, its /v1 calls do.
func TestAuthUIAssetsOpen(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		admin := servertest.RandomHex(t, 32)
		file := filepath.Join(t.TempDir(), "admin.key")
		require.NoError(t, os.WriteFile(file, []byte(admin), 0o600))
		s := &servertest.Server{T: t, B: b}
		s.Configure = func(cfg *daemon.Config) {
			cfg.Auth, cfg.AdminKeyFile = true, file
			cfg.UI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "<html>ui</html>") })
		}
		s.Boot()
		t.Cleanup(s.Stop)
		code, _, got := raw(s, http.MethodGet, "/ui/index.html", "", "", nil)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "<html>ui</html>", string(got))
		code, _, _ = raw(s, http.MethodPost, "/v1/queues.list", "application/json", "", []byte(`{}`))
		require.Equal(t, http.StatusUnauthorized, code)
		code, _, _ = raw(s, http.MethodPost, "/v1/queues.list", "application/json", "Bearer "+admin, []byte(`{}`))
		require.Equal(t, http.StatusOK, code)
	})
}

// TestAuthQueuePatterns checks keys limited to queue-name patterns: calls
// on other queues are 403, lists leave them out, and a redrive or dead
// queue outside the patterns is refused.
func TestAuthQueuePatterns(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		for _, q := range []string{"orders-dead", "billing-dead"} {
			s.CreateQueue(&pb.QueueInfo{QueueName: q})
		}
		s.CreateQueue(&pb.QueueInfo{QueueName: "orders-eu", DeadQueue: "orders-dead", MaxAttempts: 1})
		s.CreateQueue(&pb.QueueInfo{QueueName: "orders-us"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "billing", DeadQueue: "billing-dead", MaxAttempts: 1})
		s.CreateQueue(&pb.QueueInfo{QueueName: "xorders"})
		w := s.Client(s.NewKey("orders-worker", []string{"produce", "consume", "read", "dead"}, "orders*", "exact"))

		require.NoError(t, w.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "orders-eu", Items: []*pb.QueueProduceItem{{Bytes: []byte("a")}}}))
		require.NoError(t, w.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "orders-us", Items: []*pb.QueueProduceItem{{Bytes: []byte("b")}}}))
		for _, q := range []string{"billing", "xorders", "exactly", "Orders-eu"} {
			err := w.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: q, Items: []*pb.QueueProduceItem{{Bytes: []byte("c")}}})
			servertest.RequireCode(t, err, styx.CodeForbidden, "scope 'produce' only for queues 'orders*,exact', not for '"+q+"'")
		}
		_, err := w.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "billing"})
		servertest.RequireCode(t, err, styx.CodeForbidden, "scope 'read'")
		_, err = w.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "orders-nope"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "queue does not exist")

		// queues.list shows only covered queues, and pages over the rest.
		res, err := w.QueuesList(ctx, &pb.QueuesListRequest{})
		require.NoError(t, err)
		var names []string
		for _, q := range res.Items {
			names = append(names, q.QueueName)
		}
		require.Equal(t, []string{"orders-dead", "orders-eu", "orders-us"}, names)
		res, err = w.QueuesList(ctx, &pb.QueuesListRequest{Limit: 1, Pivot: "orders-e"})
		require.NoError(t, err)
		require.Len(t, res.Items, 1)
		require.Equal(t, "orders-eu", res.Items[0].QueueName)

		// Dead items and redrives: both queues must be covered.
		for _, q := range []string{"orders-eu", "billing"} {
			s.Produce(q, "dead")
			it := s.Lease(q, 1)
			s.Retry(q, it.Partition, &pb.QueueRetryItem{Id: it.Items[0].Id, Dead: true})
		}
		_, err = w.DeadList(ctx, &pb.DeadListRequest{QueueName: "billing-dead"})
		servertest.RequireCode(t, err, styx.CodeForbidden, "scope 'dead'")
		_, err = w.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "orders-dead", Destination: "billing", DryRun: true})
		servertest.RequireCode(t, err, styx.CodeForbidden, "not for 'billing'")
		other, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "billing-dead", All: true})
		require.NoError(t, err)
		mine, err := w.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "orders-dead", All: true})
		require.NoError(t, err)
		require.Equal(t, "orders-worker", mine.KeyName)
		require.Equal(t, "bootstrap-admin", other.KeyName)
		_, err = w.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: other.TaskId})
		servertest.RequireCode(t, err, styx.CodeForbidden, "not for 'billing-dead'")
		_, err = w.RedrivesCancel(ctx, &pb.RedriveTaskRequest{TaskId: other.TaskId})
		servertest.RequireCode(t, err, styx.CodeForbidden, "not for 'billing-dead'")
		tasks, err := w.RedrivesList(ctx, &pb.RedrivesListRequest{})
		require.NoError(t, err)
		require.Len(t, tasks.Tasks, 1, "only the covered queue's task")
		require.Equal(t, mine.TaskId, tasks.Tasks[0].TaskId)

		// An admin key with patterns administers those queues only, and
		// not the keys.
		a := s.Client(s.NewKey("orders-admin", []string{"admin"}, "orders*"))
		require.NoError(t, a.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders-new", DeadQueue: "orders-dead"}))
		err = a.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders-new2", DeadQueue: "billing-dead"})
		servertest.RequireCode(t, err, styx.CodeForbidden, "not for 'billing-dead'")
		_, err = a.KeysList(ctx, &pb.KeysListRequest{})
		servertest.RequireCode(t, err, styx.CodeForbidden, "/v1/keys.list needs it for every queue")
		_, err = a.KeysCreate(ctx, &pb.KeysCreateRequest{Name: "escalate", Scopes: []string{"admin"}})
		servertest.RequireCode(t, err, styx.CodeForbidden)
	})
}

// TestAuthKeyLifecycle checks keys.create validation, that keys.list never
// shows a secret, that a deleted key is refused at once, and that keys
// survive a restart.
func TestAuthKeyLifecycle(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "q"})
		for _, tc := range []struct {
			req  *pb.KeysCreateRequest
			code int
			msg  string
		}{
			{&pb.KeysCreateRequest{Scopes: []string{"read"}}, 400, "invalid name; '' must be 1..128 characters"},
			{&pb.KeysCreateRequest{Name: "a b", Scopes: []string{"read"}}, 400, "invalid name; 'a b' may hold only letters"},
			{&pb.KeysCreateRequest{Name: strings.Repeat("n", 129), Scopes: []string{"read"}}, 400, "must be 1..128 characters"},
			{&pb.KeysCreateRequest{Name: "bootstrap-admin", Scopes: []string{"read"}}, 400, "reserved"},
			{&pb.KeysCreateRequest{Name: "k"}, 400, "invalid scopes; at least one of produce, consume, dead, read, admin is required"},
			{&pb.KeysCreateRequest{Name: "k", Scopes: []string{"read", "write"}}, 400, "invalid scopes[1]; 'write' is not one of produce, consume, dead, read, admin"},
			{&pb.KeysCreateRequest{Name: "k", Scopes: []string{"read", "read"}}, 400, "invalid scopes[1]; 'read' is given twice"},
			{&pb.KeysCreateRequest{Name: "k", Scopes: []string{"read"}, Queues: []string{"ok", ""}}, 400, "invalid queues[1]; '' must be 1..512 characters"},
			{&pb.KeysCreateRequest{Name: "k", Scopes: []string{"read"}, Queues: []string{"a b"}}, 400, "invalid queues[0]; 'a b' may not hold whitespace or '~'"},
			{&pb.KeysCreateRequest{Name: "k", Scopes: []string{"read"}, Queues: make([]string, 65)}, 400, "invalid queues; 65 patterns, the limit is 64"},
		} {
			_, err := s.C.KeysCreate(ctx, tc.req)
			servertest.RequireCode(t, err, tc.code, tc.msg)
		}

		res, err := s.C.KeysCreate(ctx, &pb.KeysCreateRequest{Name: "worker", Scopes: []string{"produce", "read"}, Queues: []string{"q*"}})
		require.NoError(t, err)
		secret := res.Key
		require.Regexp(t, `^styx_[0-9a-f]{16}_[0-9a-f]{64}$`, secret)
		_, err = s.C.KeysCreate(ctx, &pb.KeysCreateRequest{Name: "worker", Scopes: []string{"read"}})
		servertest.RequireCode(t, err, styx.CodeConflict, "a key named 'worker' exists")

		list, err := s.C.KeysList(ctx, &pb.KeysListRequest{})
		require.NoError(t, err)
		require.Len(t, list.Keys, 1)
		require.Equal(t, "worker", list.Keys[0].Name)
		require.Equal(t, []string{"produce", "read"}, list.Keys[0].Scopes)
		require.Equal(t, []string{"q*"}, list.Keys[0].Queues)
		require.Equal(t, "bootstrap-admin", list.Keys[0].CreatedBy)
		for _, enc := range [][]byte{mustJSON(t, list), mustProto(t, list)} {
			require.NotContains(t, string(enc), secret[len(secret)-64:], "keys.list holds no secret")
		}

		w := s.Client(secret)
		require.NoError(t, w.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "q", Items: []*pb.QueueProduceItem{{Bytes: []byte("1")}}}))

		s.Restart()
		w = s.Client(secret)
		require.NoError(t, w.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "q", Items: []*pb.QueueProduceItem{{Bytes: []byte("2")}}}),
			"a key survives a restart")

		require.NoError(t, s.C.KeysDelete(ctx, &pb.KeysDeleteRequest{Name: "worker"}))
		err = w.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "q", Items: []*pb.QueueProduceItem{{Bytes: []byte("3")}}})
		servertest.RequireCode(t, err, styx.CodeUnauthorized, "unknown API key")
		servertest.RequireCode(t, s.C.KeysDelete(ctx, &pb.KeysDeleteRequest{Name: "worker"}), styx.CodeNotFound, "no key named 'worker'")
		require.Len(t, s.Items("q"), 2)
		assert.Contains(t, s.Logs.String(), `msg="audit: api key created" key=bootstrap-admin name=worker`)
		assert.Contains(t, s.Logs.String(), `msg="audit: api key deleted" key=bootstrap-admin name=worker`)
	})
}

func mustJSON(t *testing.T, m proto.Message) []byte {
	b, err := protojson.Marshal(m)
	require.NoError(t, err)
	return b
}

func mustProto(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	return b
}

// TestAuthSecretNotStored checks that a key's secret is nowhere in the
// Pebble data directory or the PostgreSQL table, only its hash.
func TestAuthSecretNotStored(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		dir := t.TempDir()
		if b.Name == "pebble" {
			b.Open = func(t *testing.T) store.Store {
				s, err := pebble.Open(pebble.Config{Dir: dir, Logger: servertest.TestLogger()})
				require.NoError(t, err)
				return s
			}
		}
		s, _ := servertest.StartAuth(t, b)
		res, err := s.C.KeysCreate(ctx, &pb.KeysCreateRequest{Name: "secretive", Scopes: []string{"read"}})
		require.NoError(t, err)
		secret := res.Key[len(res.Key)-64:]
		_, err = s.Client(res.Key).QueuesList(ctx, &pb.QueuesListRequest{})
		require.NoError(t, err)
		s.Stop()
		switch b.Name {
		case "pebble":
			files := 0
			require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				data, err := os.ReadFile(path)
				require.NoError(t, err)
				files++
				for _, needle := range []string{secret, res.Key, strings.ToUpper(secret)} {
					require.NotContains(t, string(data), needle, path)
				}
				require.False(t, bytes.Contains(data, mustHex(t, secret)), "raw secret bytes in %s", path)
				return nil
			}))
			require.Positive(t, files)
		case "postgres":
			conn, err := pgx.Connect(ctx, b.URL)
			require.NoError(t, err)
			defer conn.Close(ctx)
			var row string
			require.NoError(t, conn.QueryRow(ctx, `SELECT string_agg(k::text, ' ') FROM styx_api_keys k`).Scan(&row))
			require.Contains(t, row, "secretive")
			require.NotContains(t, row, secret)
			require.NotContains(t, row, hex.EncodeToString(mustHex(t, secret)))
		}
	})
}

func mustHex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}
