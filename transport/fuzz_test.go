package transport_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/styxq/styx/internal/backend/embedded"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/redrive"
	"github.com/styxq/styx/metrics"
	"github.com/styxq/styx/service"
	"github.com/styxq/styx/transport"
)

var paths = []string{
	"/v1/queue.produce", "/v1/queue.lease", "/v1/queue.complete", "/v1/queue.retry", "/v1/queue.stats",
	"/v1/queue.clear", "/v1/queue.reload", "/v1/queues.create", "/v1/queues.update", "/v1/queues.list",
	"/v1/queues.info", "/v1/queues.delete", "/v1/storage/items.list", "/v1/storage/scheduled.list",
	"/v1/storage/items.import", "/v1/storage/items.delete", "/v1/dead.list", "/v1/dead.groups", "/v1/dead.delete",
	"/v1/dead.redrive", "/v1/redrives.list", "/v1/redrives.get", "/v1/redrives.cancel",
	"/v1/queue.renew",
}

// newHandler returns the HTTP handler over a memory store holding queue
// "q" (with dead-letter queue "q-dead") and one item.
func newHandler(t testing.TB) http.Handler {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := metrics.New()
	s, err := pebble.OpenMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	qm, err := embedded.NewManager(ctx, embedded.Config{Store: s, Clock: clock.Real{}, Log: log, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range []queue.QueueInfo{
		{Name: "q-dead", LeaseTimeout: time.Minute, ExpireTimeout: time.Hour, Partitions: 1},
		{Name: "q", DeadQueue: "q-dead", LeaseTimeout: time.Minute, ExpireTimeout: time.Hour, Partitions: 1},
	} {
		if err := qm.Create(ctx, info); err != nil {
			t.Fatal(err)
		}
	}
	r, err := redrive.New(ctx, redrive.Config{Queues: qm, Store: s, Clock: clock.Real{}, Log: log, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); qm.Close() })
	return transport.NewHandler(transport.Config{Service: service.New(qm, r, clock.Real{}), Metrics: m, Log: log,
		AllowedHosts: []string{"example.com"}}) // httptest.NewRequest's Host
}

// FuzzHandler sends arbitrary bodies to every path in both encodings: the
// server never panics, never answers 500, and always answers a body in the
// encoding asked for. Run longer with:
//
//	go test -run '^$' -fuzz FuzzHandler -fuzztime 1m ./transport/
func FuzzHandler(f *testing.F) {
	h := newHandler(f)
	for i := range paths {
		f.Add(uint8(i), false, []byte(`{"queue_name":"q","items":[{"utf8":"x"}],"batch_size":1,"client_id":"c","request_timeout":"20ms"}`))
		f.Add(uint8(i), false, []byte(`{"queue_name":"q","ids":["0000000000000"],"filter":{"reason":"expired"}}`))
		f.Add(uint8(i), true, []byte{0x0a, 0x01, 'q', 0x10, 0x01})
		f.Add(uint8(i), false, []byte(`{"queue_name":"q","partition":-1,"limit":-5,"pivot":"zz"}`))
	}
	f.Fuzz(func(t *testing.T, route uint8, protobuf bool, body []byte) {
		path := paths[int(route)%len(paths)]
		ct := "application/json"
		if protobuf {
			ct = "application/protobuf"
		}
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		ctx, cancel := context.WithTimeout(req.Context(), 200*time.Millisecond) // bounds long-polls
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		if rec.Code == http.StatusInternalServerError {
			t.Fatalf("%s %s %q: 500 %s", path, ct, body, rec.Body.String())
		}
		if !slices.Contains([]int{200, 400, 404, 409, 454, 455}, rec.Code) {
			t.Fatalf("%s %s %q: unexpected status %d %s", path, ct, body, rec.Code, rec.Body.String())
		}
		if got := rec.Header().Get("Content-Type"); got != ct {
			t.Fatalf("%s: reply in %q, asked for %q", path, got, ct)
		}
	})
}
