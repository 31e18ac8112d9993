package main

// The ceilings: what the machine gives a closed loop of Styx's shape with
// no queue server's own work in it, so that a row's ratio to its peer can
// be read against what is possible at all (docs/benchmarks.md, "The
// ceilings beside the peers").
//
//   - http-floor: a Go net/http server that only reads each request and
//     answers it with bytes of the size Styx answers, and net/http clients
//     sending Styx's requests (produce: one POST of the batch's payloads;
//     cycle: that, then a lease answered with the payloads, then a complete).
//     The per-request cost of HTTP/1.1 between two processes on this
//     machine, with no storage and no queue.
//   - sql: the row work of a leased queue in bare SQL on PostgreSQL, each
//     statement its own transaction from its client's own connection (as
//     4 independent clients would run it, with PostgreSQL's group commit):
//     produce INSERTs the batch, cycle then leases the oldest batch of
//     unleased rows (FOR UPDATE SKIP LOCKED, an UPDATE setting the owner
//     and lease deadline) and DELETEs them. One table with the primary key
//     and two partial indexes, fsync and synchronous_commit as the cluster
//     has them.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// httpFloor is the http-floor system; cfg.URL is the base URL of a server
// run by serveHTTPFloor.
type httpFloor struct {
	cfg config
	hc  *http.Client // shared by every client goroutine
}

// newHTTPFloor returns the http-floor system of cfg, with one HTTP client
// whose pool keeps a connection per client goroutine.
func newHTTPFloor(cfg config) *httpFloor {
	return &httpFloor{cfg: cfg, hc: &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 4*cfg.Clients + 16}, Timeout: opTimeout}}
}

// serveHTTPFloor serves the floor's endpoints on addr until ctx ends:
// /produce answers 64 bytes (an answer with ids), /lease?n=N answers N
// payloads of size bytes, /complete answers nothing. Every request body is
// read to its end first.
func serveHTTPFloor(ctx context.Context, addr string, size int) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	small, payload := make([]byte, 64), bytes.Repeat([]byte{'p'}, size)
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, r *http.Request, b []byte) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/protobuf")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	}
	mux.HandleFunc("POST /produce", func(w http.ResponseWriter, r *http.Request) { answer(w, r, small) })
	mux.HandleFunc("POST /complete", func(w http.ResponseWriter, r *http.Request) { answer(w, r, nil) })
	mux.HandleFunc("POST /lease", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 1 || n > 1000 {
			http.Error(w, "n: 1..1000", http.StatusBadRequest)
			return
		}
		answer(w, r, bytes.Repeat(payload, n))
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { answer(w, r, nil) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// post sends body to path and reads the answer to its end.
func (h *httpFloor) post(ctx context.Context, path string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.cfg.URL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/protobuf")
	resp, err := h.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return nil
}

func (h *httpFloor) ping(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.cfg.URL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s", resp.Status)
	}
	return nil
}

func (h *httpFloor) run(ctx context.Context, w *window) (string, error) {
	produce := bytes.Repeat([]byte{'p'}, h.cfg.Batch*(h.cfg.Payload+16))
	lease := make([]byte, 64)
	complete := make([]byte, 16*h.cfg.Batch)
	leasePath := "/lease?n=" + strconv.Itoa(h.cfg.Batch)
	var wg sync.WaitGroup
	for range h.cfg.Clients {
		wg.Go(func() {
			for w.running(ctx) {
				if err := h.post(ctx, "/produce", produce); err != nil {
					w.fail(ctx, "produce", err)
					continue
				}
				if h.cfg.Workload == "cycle" {
					if err := h.post(ctx, leasePath, lease); err != nil {
						w.fail(ctx, "lease", err)
						continue
					}
					if err := h.post(ctx, "/complete", complete); err != nil {
						w.fail(ctx, "complete", err)
						continue
					}
				}
				w.done(h.cfg.Batch)
			}
		})
	}
	wg.Wait()
	desc := "Go net/http server and clients, HTTP/1.1 keep-alive, no storage: produce is one POST of the batch"
	if h.cfg.Workload == "cycle" {
		desc += ", then a lease answered with the payloads and a complete"
	}
	return desc, nil
}

// bareSQL is the sql system; cfg.URL is a database's DSN.
type bareSQL struct {
	cfg config
}

func (s *bareSQL) ping(ctx context.Context) error {
	c, err := pgx.Connect(ctx, s.cfg.URL)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.Ping(ctx)
}

func (s *bareSQL) run(ctx context.Context, w *window) (string, error) {
	table := fmt.Sprintf("bare_queue_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, s.cfg.URL)
	if err != nil {
		return "", err
	}
	defer admin.Close(context.Background())
	for _, q := range []string{
		`CREATE TABLE ` + table + ` (id bigserial PRIMARY KEY, owner int, lease_deadline timestamptz, payload bytea NOT NULL)`,
		`CREATE INDEX ` + table + `_ready ON ` + table + ` (id) WHERE owner IS NULL`,
		`CREATE INDEX ` + table + `_leased ON ` + table + ` (lease_deadline) WHERE owner IS NOT NULL`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			return "", err
		}
	}
	defer func() { _, _ = admin.Exec(context.Background(), `DROP TABLE `+table) }()
	insert := `INSERT INTO ` + table + ` (payload) SELECT unnest($1::bytea[])`
	lease := `UPDATE ` + table + ` t SET owner = $1, lease_deadline = now() + interval '1 minute'
		FROM (SELECT id FROM ` + table + ` WHERE owner IS NULL ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED) c
		WHERE t.id = c.id RETURNING t.id, t.payload`
	remove := `DELETE FROM ` + table + ` WHERE id = ANY($1) AND owner = $2`
	conns := make([]*pgx.Conn, s.cfg.Clients)
	for i := range conns {
		if conns[i], err = pgx.Connect(ctx, s.cfg.URL); err != nil {
			return "", err
		}
		defer conns[i].Close(context.Background())
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		bodies := payloads(s.cfg.Batch, s.cfg.Payload)
		wg.Go(func() {
			ids := make([]int64, 0, s.cfg.Batch)
			for w.running(ctx) {
				if _, err := c.Exec(ctx, insert, bodies); err != nil {
					w.fail(ctx, "insert", err)
					continue
				}
				if s.cfg.Workload == "produce" {
					w.done(len(bodies))
					continue
				}
				rows, err := c.Query(ctx, lease, i, s.cfg.Batch)
				if err != nil {
					w.fail(ctx, "lease", err)
					continue
				}
				ids = ids[:0]
				var id int64
				var payload []byte
				_, err = pgx.ForEachRow(rows, []any{&id, &payload}, func() error {
					ids = append(ids, id)
					return nil
				})
				if err != nil {
					w.fail(ctx, "lease", err)
					continue
				}
				if len(ids) == 0 {
					continue
				}
				if _, err := c.Exec(ctx, remove, ids, i); err != nil {
					w.fail(ctx, "delete", err)
					continue
				}
				w.done(len(ids))
			}
		})
	}
	wg.Wait()
	desc := "bare SQL through pgx, a connection per client, each statement its own transaction: INSERT of the batch"
	if s.cfg.Workload == "cycle" {
		desc += "; UPDATE … FOR UPDATE SKIP LOCKED of the oldest unleased rows; DELETE of them"
	}
	return desc, nil
}
