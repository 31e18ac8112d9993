package service_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestKeysNeedAuth (issue 24, 3): on a server started without --auth,
// keys.create, keys.list and keys.delete are refused with 400 saying to
// start with --auth, and nothing is stored: a key minted there would be a
// valid key (an admin one) once auth is turned on, minted by anyone who
// could reach the port. Before, keys.create worked.
func TestKeysNeedAuth(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		_, err := s.C.KeysCreate(ctx, &pb.KeysCreateRequest{Name: "sneaky", Scopes: []string{"admin"}})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "start the server with --auth")
		_, err = s.C.KeysList(ctx, &pb.KeysListRequest{})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "--auth")
		err = s.C.KeysDelete(ctx, &pb.KeysDeleteRequest{Name: "sneaky"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "--auth")

		// The same storage, now with --auth: no key was made.
		s.Stop()
		a, _ := servertest.StartAuth(t, b)
		keys, err := a.C.KeysList(ctx, &pb.KeysListRequest{})
		require.NoError(t, err)
		for _, k := range keys.Keys {
			require.NotEqual(t, "sneaky", k.Name)
		}
	})
}

// TestFileModes (issue 24, 9): a new data directory is made 0700 (only the
// server's user may read the items); an admin key file other users may
// write is refused at start, naming the mode (they could choose the admin
// key), and one they may read starts with a warning. Before, the data
// directory was 0755 and any key file was taken.
func TestFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	logs := &servertest.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	key := filepath.Join(t.TempDir(), "admin.key")
	require.NoError(t, os.WriteFile(key, []byte(strings.Repeat("k", 40)), 0o600))
	require.NoError(t, os.Chmod(key, 0o666))
	cfg := daemon.Config{Listen: "127.0.0.1:0", DataDir: dir, Auth: true, AdminKeyFile: key, Log: log}
	_, err := daemon.New(ctx, cfg)
	require.ErrorContains(t, err, "lets other users write it")

	require.NoError(t, os.Chmod(key, 0o644))
	d, err := daemon.New(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Close(ctx))
	require.Contains(t, logs.String(), "admin key file is readable by other users")
	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
}

// TestDebugListen (issue 24, 5): a --debug-listen address that is not
// loopback is refused at start (pprof has no key) unless
// --debug-allow-remote; the cmdline page never shows a secret passed as a
// flag. Before, it started silently and showed a --postgres-url password.
func TestDebugListen(t *testing.T) {
	cfg := daemon.Config{Listen: "127.0.0.1:0", Storage: daemon.StorageMemory, DebugListen: "0.0.0.0:0", Log: slog.New(slog.DiscardHandler)}
	_, err := daemon.New(ctx, cfg)
	require.ErrorContains(t, err, "debug_listen: 0.0.0.0:0 is not a loopback address")
	cfg.DebugAllowRemote = true
	cfg.SetDefaults()
	require.NoError(t, cfg.Validate())

	got := daemon.RedactArgs([]string{"styx", "server", "--postgres-url", "postgres://styx:hunter2@db/styx",
		"--api-key=abcdef", "--listen", "127.0.0.1:2319", "postgres://u:pw@h/x"})
	require.Equal(t, []string{"styx", "server", "--postgres-url", "REDACTED", "--api-key=REDACTED", "--listen",
		"127.0.0.1:2319", "postgres://u:REDACTED@h/x"}, got)
}

// TestHiddenCharactersInNames (issue 24, 7): queue names and key patterns
// that hold control, bidi or zero-width characters (names that look like
// other names in the UI and logs) are refused with 400 naming the
// character and its position, on create and on every call that names a
// queue. Before, U+202E and U+200B were accepted.
func TestHiddenCharactersInNames(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		err := s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders\u202egpj.exe"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "U+202E at character 6")
		err = s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "or\u200bders", RequestTimeout: "1s",
			Items: []*pb.QueueProduceItem{{Bytes: []byte("x")}}})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "U+200B at character 2")
		_, err = s.C.KeysCreate(ctx, &pb.KeysCreateRequest{Name: "w", Scopes: []string{"read"}, Queues: []string{"bil\u200dling*"}})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "U+200D at character 3")
		list, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{Limit: 10})
		require.NoError(t, err)
		require.Empty(t, list.Items)
	})
}

// TestScopeBypassThroughDeadItems (issue 24, 1): a key limited to orders*
// can neither import into orders-dead a dead item naming billing as its
// source queue (403) nor redrive such an item there: a redrive checks every
// destination, the explicit one or each item's source queue, against the
// key that started it, and skips (and counts) what the key does not cover.
// Before, the item landed in billing.
func TestScopeBypassThroughDeadItems(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "orders-dead"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "orders", DeadQueue: "orders-dead"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "billing"})
		limited := s.Client(s.NewKey("orders-admin", []string{"admin"}, "orders*"))

		forged := &pb.StorageItem{Payload: []byte("pay me"), SourceQueue: "billing", DeadReason: "explicit"}
		_, err := limited.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "orders-dead", Items: []*pb.StorageItem{forged}})
		servertest.RequireCode(t, err, styx.CodeForbidden, "billing")

		// The same item, imported by a key of every queue (say, a restore),
		// and one of orders'.
		_, err = s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "orders-dead", Items: []*pb.StorageItem{
			forged, {Payload: []byte("order 1"), SourceQueue: "orders", DeadReason: "explicit"}}})
		require.NoError(t, err)
		task, err := limited.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "orders-dead", All: true})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool {
			task, err = s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
			return err == nil && task.Status != "running"
		}, "the redrive ends")
		require.Equal(t, int64(1), task.Moved, "%v", task)
		require.Equal(t, int64(1), task.Skipped, "%v", task)
		require.Equal(t, "orders-admin", task.KeyName)
		require.Empty(t, s.Items("billing"), "nothing reached a queue the key does not cover")
		require.Equal(t, []string{"order 1"}, payloads(s.Items("orders")))
		require.Equal(t, []string{"pay me"}, payloads(s.Items("orders-dead")))
	})
}

// postWith sends a JSON body to the server's path with the given Host and
// Origin headers (none when empty) and returns the status and body.
func postWith(s *servertest.Server, path, host, origin, body string) (int, string) {
	s.T.Helper()
	req, err := http.NewRequest(http.MethodPost, s.D.Endpoint()+path, strings.NewReader(body))
	require.NoError(s.T, err)
	req.Header.Set("Content-Type", "application/json")
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, b := do(s, req)
	return resp.StatusCode, string(b)
}

// TestDNSRebinding (issue 24, 2): a server without --auth answers only
// requests naming a loopback host (localhost, 127.0.0.1, [::1], with or
// without the port) or one listed with --allowed-host, and refuses a
// browser's call from another origin: a page the operator visits cannot
// drive it through a name that resolves to 127.0.0.1. /health stays open.
// Before, any Host was answered.
func TestDNSRebinding(t *testing.T) {
	s := servertest.StartWith(t, servertest.Backends(t)[0], func(cfg *daemon.Config) { cfg.AllowedHosts = []string{"styx.internal"} })
	s.CreateQueue(&pb.QueueInfo{QueueName: "q"})
	list := `{"limit":10}`
	for _, host := range []string{"localhost", "localhost:2319", "127.0.0.1:9", "[::1]:2319", "styx.internal:2319", "STYX.internal"} {
		code, body := postWith(s, "/v1/queues.list", host, "", list)
		require.Equal(t, http.StatusOK, code, "%s: %s", host, body)
	}
	code, body := postWith(s, "/v1/queues.list", "rebind.attacker.example:2319", "", list)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "--allowed-host rebind.attacker.example")
	code, body = postWith(s, "/v1/queues.delete", "127.0.0.1:2319", "http://attacker.example", `{"queue_name":"q"}`)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "may not call this server")
	code, _ = postWith(s, "/v1/queues.list", "127.0.0.1:2319", "http://127.0.0.1:2319", list)
	require.Equal(t, http.StatusOK, code, "the UI's own origin")
	resp, err := http.Get(s.D.Endpoint() + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "q"})
	require.NoError(t, err, "the queue is still there")
}

// TestRevocationEndsWaitingLease (issue 24, 4): a long-poll lease waiting
// when its key is deleted ends at once with 401, and an item produced after
// the delete is never handed to it (it stays ready for others). Before,
// the lease stayed open up to its timeout and took the item.
func TestRevocationEndsWaitingLease(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "rq"})
		worker := s.Client(s.NewKey("worker", []string{"consume"}, "rq"))
		leased := make(chan error, 1)
		go func() {
			res, err := worker.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "rq", BatchSize: 1, ClientId: "w1", RequestTimeout: "30s"})
			if err == nil {
				err = fmt.Errorf("lease answered with %d items", len(res.Items))
			}
			leased <- err
		}()
		servertest.WaitStat(t, s, "rq", func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 1 })
		require.NoError(t, s.C.KeysDelete(ctx, &pb.KeysDeleteRequest{Name: "worker"}))
		s.Produce("rq", "after the revocation")
		select {
		case err := <-leased:
			servertest.RequireCode(t, err, styx.CodeUnauthorized, "deleted while the request waited")
		case <-time.After(10 * time.Second):
			t.Fatal("the revoked key's lease still waits")
		}
		res := s.Lease("rq", 1)
		require.Len(t, res.Items, 1)
		require.Equal(t, "after the revocation", string(res.Items[0].Bytes))
	})
}

// TestClientIDPerKey (issue 24, 8): a client_id is unique per API key among
// a queue's waiting leases, so a consume key cannot block another key's
// worker by waiting under that worker's client_id; the same key still
// cannot wait twice under one client_id (400). Before, the squatter won.
func TestClientIDPerKey(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "cq"})
		squatter := s.Client(s.NewKey("squatter", []string{"consume"}, "cq"))
		worker := s.Client(s.NewKey("worker", []string{"consume"}, "cq"))
		go func() {
			_, _ = squatter.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "cq", BatchSize: 1, ClientId: "billing-worker-1", RequestTimeout: "3s"})
		}()
		servertest.WaitStat(t, s, "cq", func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 1 })
		_, err := squatter.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "cq", BatchSize: 1, ClientId: "billing-worker-1", RequestTimeout: "1s"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "duplicate client id")
		got := make(chan error, 1)
		go func() {
			_, err := worker.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "cq", BatchSize: 1, ClientId: "billing-worker-1", RequestTimeout: "10s"})
			got <- err
		}()
		servertest.WaitStat(t, s, "cq", func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 2 })
		s.Produce("cq", "for anyone")
		s.Produce("cq", "for anyone else")
		select {
		case err := <-got:
			require.NoError(t, err, "the worker's lease waits beside the squatter's and is served")
		case <-time.After(10 * time.Second):
			t.Fatal("the worker's lease was not served")
		}
	})
}

// TestAuditAndRefusals (issue 24, 6): storage/items.import, queues.create,
// queues.update and queue.reload are audited with the key's name; a
// refused request (401, 403) is logged at WARN with the key's id, never
// its secret, and those lines are rate-limited (anyone can send refused
// requests). Before, none of these were logged.
func TestAuditAndRefusals(t *testing.T) {
	s, _ := servertest.StartAuth(t, servertest.Backends(t)[0])
	s.CreateQueue(&pb.QueueInfo{QueueName: "aq"})
	require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "aq", MaxAttempts: 3}))
	_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "aq", Items: []*pb.StorageItem{{Payload: []byte("x")}}})
	require.NoError(t, err)
	require.NoError(t, s.C.QueueReload(ctx, &pb.QueueReloadRequest{QueueName: "aq"}))
	for _, call := range []string{"queues.create", "queues.update", "storage/items.import", "queue.reload"} {
		require.Contains(t, s.Logs.String(), `msg="audit: `+call+`" path=/v1/`+call+` key=bootstrap-admin queue=aq`)
	}

	reader := s.NewKey("reader", []string{"read"})
	id := strings.Split(reader, "_")[1]
	for range 50 {
		err = s.Client(reader).QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "aq", RequestTimeout: "1s",
			Items: []*pb.QueueProduceItem{{Bytes: []byte("x")}}})
		servertest.RequireCode(t, err, styx.CodeForbidden)
	}
	logs := s.Logs.String()
	require.Contains(t, logs, `msg="request refused" path=/v1/queue.produce code=403`)
	require.Contains(t, logs, "key_id="+id)
	require.NotContains(t, logs, reader, "the secret is never logged")
	require.LessOrEqual(t, strings.Count(logs, `msg="request refused"`), 20, "rate-limited")
}
