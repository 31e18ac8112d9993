package main

// River (github.com/riverqueue/river) on PostgreSQL through pgx v5.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	rq "github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// benchArgs are the arguments of a bench job: its payload as text.
type benchArgs struct {
	Payload string `json:"p"`
}

// Kind is the job kind River stores.
func (benchArgs) Kind() string { return "styx_bench" }

// noopWorker works a bench job by doing nothing.
type noopWorker struct {
	rq.WorkerDefaults[benchArgs]
}

// Work returns nil: the job completes.
func (noopWorker) Work(context.Context, *rq.Job[benchArgs]) error { return nil }

// river is the River peer; cfg.URL is the database's DSN.
type river struct {
	cfg config
}

func (r *river) pool(ctx context.Context) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(r.cfg.URL)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = int32(r.cfg.RiverMaxConns)
	return pgxpool.NewWithConfig(ctx, pc)
}

func (r *river) ping(ctx context.Context) error {
	p, err := r.pool(ctx)
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Ping(ctx)
}

// backlogLimit is how many jobs the clients together may have inserted and
// not yet completed before they wait.
func (r *river) backlogLimit() int {
	per := r.cfg.RiverBacklog
	if per <= 0 {
		per = max(5*r.cfg.Batch, 250)
	}
	return per * r.cfg.Clients
}

func (r *river) run(ctx context.Context, w *window) (string, error) {
	pool, err := r.pool(ctx)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		return "", err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	// Each run starts on an empty job table: an earlier run's jobs (produce
	// leaves them all available) must not be worked or counted here.
	if _, err := pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
		return "", err
	}
	workers := rq.NewWorkers()
	rq.AddWorker(workers, &noopWorker{})
	rc := &rq.Config{
		Workers: workers,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	desc := fmt.Sprintf("pgx pool %d conns", r.cfg.RiverMaxConns)
	if r.cfg.Workload == "cycle" {
		rc.Queues = map[string]rq.QueueConfig{rq.QueueDefault: {MaxWorkers: r.cfg.RiverMaxWorkers}}
		rc.FetchCooldown = r.cfg.RiverFetchCooldown
		rc.FetchPollInterval = r.cfg.RiverFetchPollInterval
		desc += fmt.Sprintf(", MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s, backlog limit %d jobs",
			r.cfg.RiverMaxWorkers, r.cfg.RiverFetchCooldown, r.cfg.RiverFetchPollInterval, r.backlogLimit())
	}
	client, err := rq.NewClient(driver, rc)
	if err != nil {
		return "", err
	}

	// The backlog: jobs inserted and not yet completed, under mu; cond is
	// signalled when it shrinks and when the window ends.
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		backlog int
	)
	limit := r.backlogLimit()
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	var events sync.WaitGroup
	if r.cfg.Workload == "cycle" {
		ch, cancelSub := client.SubscribeConfig(&rq.SubscribeConfig{ChanSize: 1 << 18, Kinds: []rq.EventKind{rq.EventKindJobCompleted}})
		defer cancelSub()
		events.Add(1)
		go func() {
			defer events.Done()
			for {
				select {
				case ev, ok := <-ch:
					if !ok {
						return
					}
					if ev.Kind == rq.EventKindJobCompleted {
						w.done(1)
						mu.Lock()
						backlog--
						mu.Unlock()
						cond.Broadcast()
					}
				case <-runCtx.Done():
					return
				}
			}
		}()
		if err := client.Start(ctx); err != nil {
			return "", err
		}
	}
	stopWaiters := time.AfterFunc(time.Until(w.end), func() {
		mu.Lock()
		defer mu.Unlock()
		cond.Broadcast()
	})
	defer stopWaiters.Stop()

	var wg sync.WaitGroup
	for i := 0; i < r.cfg.Clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps := payloads(r.cfg.Batch, r.cfg.Payload)
			many := make([]rq.InsertManyParams, len(ps))
			for k, p := range ps {
				many[k] = rq.InsertManyParams{Args: benchArgs{Payload: string(p)}}
			}
			for w.running(ctx) {
				if r.cfg.Workload == "cycle" {
					mu.Lock()
					for backlog+r.cfg.Batch > limit && w.running(ctx) {
						cond.Wait()
					}
					backlog += r.cfg.Batch
					mu.Unlock()
					if !w.running(ctx) {
						return
					}
				}
				var err error
				ictx, cancel := context.WithTimeout(ctx, opTimeout)
				if r.cfg.Batch == 1 {
					_, err = client.Insert(ictx, many[0].Args, nil)
				} else {
					_, err = client.InsertMany(ictx, many)
				}
				cancel()
				if err != nil {
					if r.cfg.Workload == "cycle" {
						mu.Lock()
						backlog -= r.cfg.Batch
						mu.Unlock()
					}
					w.fail(ctx, "insert", err)
					continue
				}
				if r.cfg.Workload == "produce" {
					w.done(r.cfg.Batch)
				} else if w.in(time.Now()) {
					w.inserted.Add(int64(r.cfg.Batch))
				}
			}
		}()
	}
	wg.Wait()
	if r.cfg.Workload == "cycle" {
		// Completions after the window are not counted; stop River.
		sleep(ctx, time.Until(w.end))
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		if err := client.Stop(stopCtx); err != nil {
			_, _ = fmt.Fprintf(w.stderr, "peer-bench: river stop: %v\n", err)
		}
		cancelRun()
		events.Wait()
	}
	if _, err := pool.Exec(context.WithoutCancel(ctx), "TRUNCATE river_job"); err != nil {
		return "", err
	}
	return desc, nil
}
