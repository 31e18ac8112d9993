// Package clusters runs a Styx node over several PostgreSQL clusters (ADR
// 0023): each queue lives, whole, on one cluster (its home), recorded in a
// catalog on the cluster named "main"; a Router implements queue.Queues
// over one postgres.Manager per cluster and sends each queue's calls to
// its home's Manager. Nothing of a queue's loop changes: its iterations
// are one transaction on its home cluster, as with one cluster.
//
// The catalog (catalog.go) holds each queue's placement (cluster, epoch,
// state) and each cluster's stable number, which is its item ids' residue
// modulo postgres.MaxClusters (postgres.Store.SetItemIDResidue), so ids of
// different clusters never collide. Creates, updates and deletes run
// under one catalog-wide advisory lock on main, with the dead-letter
// rules checked against the definitions of every cluster
// (postgres.Config.Others). Every node caches the placements (a NOTIFY on
// main's channel, and a refresh every RefreshInterval).
package clusters

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// Main is the name of the catalog cluster: the one --postgres-url names.
const Main = "main"

// reconcileEvery is how often a node checks the catalog against the
// clusters' queues (reconcile), when no other node holds the catalog lock.
const reconcileEvery = 10 * time.Second

// reopenEvery is how often a node retries to open a cluster it could not
// open at start.
const reopenEvery = 2 * time.Second

// Cluster is one PostgreSQL cluster of Config.
type Cluster struct {
	// Name is 1 to 63 of [a-z0-9_-], starting with a letter (ValidName).
	Name string
	// URL is the cluster's connection string (pgx syntax; every host of
	// the cluster, ADR 0021).
	URL string
	// Weight is the cluster's share of the queues created without a
	// cluster (and without a dead_queue to stay with): a cluster of
	// weight 3 gets three times the new queues of one of weight 1. 0
	// takes none unless named. Default 1 (set by the configuration).
	Weight int
}

// Config configures a Router.
type Config struct {
	// Clusters are the clusters, one named Main (the catalog). Required.
	Clusters []Cluster
	// MaxConns bounds each cluster's pool (postgres.Config.MaxConns).
	MaxConns int32
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Metrics
	// RefreshInterval is how often the placements (and each cluster's
	// definitions, postgres.Config.RefreshInterval) are re-read; default
	// postgres.DefaultRefreshInterval (1s).
	RefreshInterval time.Duration
	// StatementTimeout bounds the catalog's statements, as
	// postgres.Config.StatementTimeout; default 5s.
	StatementTimeout time.Duration
	// MoveBatchItems bounds the items of one batch of a queue's move
	// (postgres.CopyConfig.BatchItems; move.go); 0:
	// postgres.DefaultCopyBatchItems (1,000).
	MoveBatchItems int
}

var validName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// ValidName reports whether name is a valid cluster name: 1 to 63 of
// [a-z0-9_-], starting with a letter.
func ValidName(name string) bool { return validName.MatchString(name) }

// Check reports the first invalid cluster of cs, naming the field: a bad
// name, a duplicate, a missing URL, a negative weight, more than
// postgres.MaxClusters, or no cluster named Main.
func Check(cs []Cluster) error {
	seen := map[string]bool{}
	for _, c := range cs {
		switch {
		case !ValidName(c.Name):
			return fmt.Errorf("postgres_clusters: cluster name %q is invalid; want 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter", c.Name)
		case seen[c.Name]:
			return fmt.Errorf("postgres_clusters: cluster %q is named twice (the cluster of postgres_url is %q)", c.Name, Main)
		case c.URL == "":
			return fmt.Errorf("postgres_clusters: cluster %q has no URL", c.Name)
		case c.Weight < 0:
			return fmt.Errorf("postgres_cluster_weights: cluster %q has weight %d; want 0 or more", c.Name, c.Weight)
		}
		seen[c.Name] = true
	}
	if !seen[Main] {
		return fmt.Errorf("postgres_clusters: no cluster %q (postgres_url), which holds the catalog", Main)
	}
	if len(cs) > postgres.MaxClusters {
		return fmt.Errorf("postgres_clusters: %d clusters; at most %d", len(cs), postgres.MaxClusters)
	}
	return nil
}

// member is one cluster as the Router runs it.
type member struct {
	Cluster
	// number is the cluster's stable number (styx_clusters), set at Open.
	number int
	// mgr is the cluster's Manager, nil until it opens (a cluster down at
	// start is opened in the background).
	mgr atomic.Pointer[postgres.Manager]
	// failure says why the cluster is not open ("" once it is).
	failure atomic.Pointer[string]
}

func (c *member) manager() (*postgres.Manager, error) {
	if m := c.mgr.Load(); m != nil {
		return m, nil
	}
	why := "not opened yet"
	if f := c.failure.Load(); f != nil {
		why = *f
	}
	return nil, store.Unavailable("postgres cluster '"+c.Name+"'", fmt.Errorf("%s", why))
}

// Router implements queue.Queues over several PostgreSQL clusters (see
// the package comment). Locks: mu guards placements and lists; it is never
// held while calling a Manager or the database.
type Router struct {
	cfg     Config
	members map[string]*member
	names   []string // sorted
	main    *member
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	refresh chan struct{}
	// admin serializes this node's catalog steps before they take the
	// catalog lock (catalog): a step waiting for the lock holds one of
	// main's pooled connections, and the step holding it needs more (its
	// placements, main's admin step, the listing of main's queues), so
	// waiters of one node must not take the pool. Held across database
	// calls; taken before mu, never under it.
	admin sync.Mutex

	mu sync.RWMutex
	// placements is the catalog as last read (by queue name); loaded says
	// it was read at least once.
	placements map[string]placement
	loaded     bool
	// lists are each cluster's definitions as last listed (by cluster,
	// then queue name): what Others and List fall back on while a cluster
	// does not answer.
	lists map[string]map[string]queue.QueueInfo
	// closed is set by Close.
	closed bool
	// leftovers are the moved queues' rows the last sweep found left on
	// an old cluster (move.go); owned by the sweepMoves goroutine.
	leftovers map[leftover]bool
	// moveBatch, when set (tests only), is called after each batch of a
	// move this node runs, with the move's context.
	moveBatch func(context.Context, postgres.MoveProgress)
}

var _ queue.Queues = (*Router)(nil)

// Open opens the catalog cluster (Main; it must answer), numbers the
// clusters, opens the others (one that does not answer is retried in the
// background; its queues answer 453 meanwhile), reconciles the catalog
// with the clusters' queues and starts the placements' refresh.
func Open(ctx context.Context, cfg Config) (*Router, error) {
	if err := Check(cfg.Clusters); err != nil {
		return nil, err
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = postgres.DefaultRefreshInterval
	}
	if cfg.StatementTimeout <= 0 {
		cfg.StatementTimeout = postgres.DefaultStatementTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Router{cfg: cfg, members: map[string]*member{}, refresh: make(chan struct{}, 1),
		placements: map[string]placement{}, lists: map[string]map[string]queue.QueueInfo{}}
	for _, c := range cfg.Clusters {
		r.members[c.Name] = &member{Cluster: c}
		r.names = append(r.names, c.Name)
	}
	sort.Strings(r.names)
	r.main = r.members[Main]
	r.ctx, r.cancel = context.WithCancel(context.Background())
	m, err := postgres.Open(ctx, r.managerConfig(r.main, r.requestRefresh))
	if err != nil {
		return nil, fmt.Errorf("postgres cluster %q: %w", Main, err)
	}
	r.main.mgr.Store(m)
	fail := func(err error) (*Router, error) {
		r.Close()
		return nil, err
	}
	if err := r.number(ctx); err != nil {
		return fail(err)
	}
	if err := r.prepare(ctx, r.main, m); err != nil {
		return fail(err)
	}
	for _, name := range r.names {
		c := r.members[name]
		if c == r.main {
			continue
		}
		if err := r.openMember(ctx, c); err != nil {
			if postgres.IsIdentityMismatch(err) {
				return fail(err)
			}
			r.cfg.Log.Warn("postgres cluster did not open; its queues answer 453 until it does", "cluster", c.Name, "error", err)
			r.wg.Go(func() { r.reopen(c) })
		}
	}
	if err := r.loadPlacements(ctx); err != nil {
		return fail(err)
	}
	if err := r.reconcile(ctx, true); err != nil {
		r.cfg.Log.Warn("postgres clusters: reconciling the catalog failed", "error", err)
	}
	r.wg.Go(r.refresher)
	r.wg.Go(r.sweepMoves) // moves left by a node that died (move.go)
	return r, nil
}

// managerConfig is the Config of c's Manager.
func (r *Router) managerConfig(c *member, onChange func()) postgres.Config {
	return postgres.Config{URL: c.URL, MaxConns: r.cfg.MaxConns, Clock: r.cfg.Clock, Log: r.cfg.Log.With("cluster", c.Name),
		Metrics: r.cfg.Metrics, StatementTimeout: r.cfg.StatementTimeout, RefreshInterval: r.cfg.RefreshInterval,
		Cluster: c.Name, Others: func(ctx context.Context) (map[string]queue.QueueInfo, error) { return r.others(ctx, c.Name) },
		OnChange: onChange, DeadLetters: r, NoReplicationGauges: c.Name != Main}
}

var _ postgres.DeadLetters = (*Router)(nil)

// TakeDead implements postgres.DeadLetters for every cluster's Manager:
// the dead items of a queue whose dead_queue lives on another cluster go
// to that queue's home Manager (postgres.Manager.TakeDead), the second
// phase of the two-phase dead-letter move (ADR 0023). Errors: the queue's
// own (queue.NotFound), 453 when its cluster is not open on this node,
// and the home's.
func (r *Router) TakeDead(ctx context.Context, dlq string, items []postgres.DeadItem) error {
	m, _, err := r.home(ctx, dlq)
	if err != nil {
		return err
	}
	return m.TakeDead(ctx, dlq, items)
}

// openMember opens c's Manager and prepares its cluster.
func (r *Router) openMember(ctx context.Context, c *member) error {
	m, err := postgres.Open(ctx, r.managerConfig(c, nil))
	if err != nil {
		why := err.Error()
		c.failure.Store(&why)
		return err
	}
	if err := r.prepare(ctx, c, m); err != nil {
		m.Close()
		why := err.Error()
		c.failure.Store(&why)
		return err
	}
	c.failure.Store(nil)
	r.mu.Lock()
	closed := r.closed
	if !closed {
		c.mgr.Store(m)
	}
	r.mu.Unlock()
	if closed {
		m.Close()
	}
	return nil
}

// prepare checks that the database is c's (its identity) and gives its
// item ids c's residue.
func (r *Router) prepare(ctx context.Context, c *member, m *postgres.Manager) error {
	if err := m.Store().ClaimIdentity(ctx, c.Name, c.number); err != nil {
		return fmt.Errorf("postgres cluster %q: %w", c.Name, err)
	}
	if err := m.Store().SetItemIDResidue(ctx, c.number); err != nil {
		return fmt.Errorf("postgres cluster %q: %w", c.Name, err)
	}
	return nil
}

// reopen retries opening c until it opens or the Router closes.
func (r *Router) reopen(c *member) {
	t := time.NewTicker(reopenEvery)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(r.ctx, 2*r.cfg.StatementTimeout)
		err := r.openMember(ctx, c)
		cancel()
		if err == nil {
			r.cfg.Log.Info("postgres cluster opened", "cluster", c.Name)
			r.requestRefresh()
			return
		}
	}
}

// Clusters returns the clusters' names, sorted.
func (r *Router) Clusters() []string { return slices.Clone(r.names) }

// home returns the Manager of name's home cluster and the cluster, from
// the cached placements, reading the catalog once when name is not cached
// ready (a queue created on another node moments ago).
func (r *Router) home(ctx context.Context, name string) (*postgres.Manager, *member, error) {
	p, ok := r.placement(name)
	if !ok || p.State == stateCreating {
		// Not cached, or cached while its create ran: the catalog, once.
		if err := r.loadPlacements(ctx); err != nil && !r.isLoaded() {
			return nil, nil, err
		}
		p, ok = r.placement(name)
	}
	if !ok || p.State == stateCreating {
		return nil, nil, queue.NotFound(name)
	}
	c := r.members[p.Cluster]
	if c == nil {
		return nil, nil, store.Unavailable("queue '"+name+"'", fmt.Errorf("its cluster '%s' is not configured on this node", p.Cluster))
	}
	m, err := c.manager()
	return m, c, err
}

// Get implements queue.Queues: the queue's loop on its home cluster.
func (r *Router) Get(name string) (queue.Queue, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.StatementTimeout)
	defer cancel()
	m, _, err := r.home(ctx, name)
	if err != nil {
		return nil, err
	}
	return m.Get(name)
}

// Info implements queue.Queues: the definition on the home cluster, with
// Cluster set and ID made unique across clusters (globalID).
func (r *Router) Info(ctx context.Context, name string) (queue.QueueInfo, error) {
	m, c, err := r.home(ctx, name)
	if err != nil {
		return queue.QueueInfo{}, err
	}
	info, err := m.Info(ctx, name)
	if err != nil {
		return info, err
	}
	info.Move = r.moveStatus(ctx, name)
	return r.global(c, info), nil
}

// global is info as the Router shows it: Cluster named, ID the cluster's
// ID times MaxClusters plus the cluster's number (each cluster numbers its
// queues on its own; the SQS door keys its FIFO records and receipt
// handles by ID, fifo.go).
func (r *Router) global(c *member, info queue.QueueInfo) queue.QueueInfo {
	info.Cluster = c.Name
	info.ID = info.ID*postgres.MaxClusters + uint64(c.number)
	return info
}

// local splits a global ID into the cluster and that cluster's queue ID.
func (r *Router) local(id uint64) (*member, uint64, error) {
	n := int(id % postgres.MaxClusters)
	for _, c := range r.members {
		if c.number == n {
			return c, id / postgres.MaxClusters, nil
		}
	}
	return nil, 0, fmt.Errorf("clusters: queue id %d names no cluster", id)
}

// List implements queue.Queues: every cluster's queues, each listed by its
// home cluster (a cluster that does not answer: as last listed), merged in
// name order.
func (r *Router) List(ctx context.Context, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	var out []queue.QueueInfo
	for _, name := range r.names {
		c := r.members[name]
		infos, err := r.listMember(ctx, c, p)
		if err != nil {
			return nil, err
		}
		for _, info := range infos {
			if pl, ok := r.placement(info.Name); ok && pl.Cluster != c.Name {
				continue // another cluster's (a move's copy)
			}
			out = append(out, r.global(c, info))
		}
	}
	slices.SortFunc(out, func(a, b queue.QueueInfo) int { return cmp.Compare(a.Name, b.Name) })
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

// listMember lists c's queues p selects, or, when c does not answer, those
// of its last listing.
func (r *Router) listMember(ctx context.Context, c *member, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	m, err := r.answering(c)
	if err == nil {
		lctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
		var infos []queue.QueueInfo
		infos, err = m.List(lctx, p)
		cancel()
		if err == nil {
			return infos, nil
		}
	}
	r.mu.RLock()
	last, ok := r.lists[c.Name]
	r.mu.RUnlock()
	if !ok {
		return nil, err
	}
	var infos []queue.QueueInfo
	for _, info := range last {
		if (p.Namespace == "" || info.Namespace == p.Namespace) && info.Name >= p.Pivot {
			infos = append(infos, info)
		}
	}
	return infos, nil
}

// answering returns c's Manager unless c is not open or its last health
// probe said it cannot answer (postgres.Manager.Health: cached, so a
// listing falls back on the last one at once instead of waiting on a
// frozen or unreachable cluster).
func (r *Router) answering(c *member) (*postgres.Manager, error) {
	m, err := c.manager()
	if err != nil {
		return nil, err
	}
	if why := m.Health(); why != "" {
		return nil, store.Unavailable("postgres cluster '"+c.Name+"'", errors.New(why))
	}
	return m, nil
}

// others returns the definitions of the queues on every cluster but
// except (postgres.Config.Others): each listed now, or as last listed
// when its cluster does not answer; an error when a cluster never
// answered (the rules cannot be checked without its queues).
func (r *Router) others(ctx context.Context, except string) (map[string]queue.QueueInfo, error) {
	out := map[string]queue.QueueInfo{}
	for _, name := range r.names {
		if name == except {
			continue
		}
		defs, err := r.definitions(ctx, r.members[name])
		if err != nil {
			return nil, err
		}
		maps.Copy(out, defs)
	}
	return out, nil
}

// definitions lists every queue of c and keeps the listing (lists), or
// returns the last listing when c does not answer.
func (r *Router) definitions(ctx context.Context, c *member) (map[string]queue.QueueInfo, error) {
	m, err := r.answering(c)
	if err == nil {
		lctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
		var infos []queue.QueueInfo
		infos, err = m.List(lctx, queue.ListQueuesParams{})
		cancel()
		if err == nil {
			defs := make(map[string]queue.QueueInfo, len(infos))
			for _, info := range infos {
				defs[info.Name] = info
			}
			r.mu.Lock()
			r.lists[c.Name] = defs
			r.mu.Unlock()
			return defs, nil
		}
	}
	r.mu.RLock()
	last, ok := r.lists[c.Name]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("the queues of cluster '%s' are not known (it has not answered since this node started): %w", c.Name, err)
	}
	return last, nil
}

// Sample returns every open cluster's queue samples (the queue gauges).
func (r *Router) Sample() []metrics.QueueSample {
	var out []metrics.QueueSample
	for _, name := range r.names {
		if m := r.members[name].mgr.Load(); m != nil {
			out = append(out, m.Sample()...)
		}
	}
	return out
}

// Main returns the catalog cluster's Manager, whose Store holds the API
// keys, the redrive tasks and the activity log of every cluster.
func (r *Router) Main() *postgres.Manager { return r.main.mgr.Load() }

// Close stops the refresh and closes every cluster's Manager.
func (r *Router) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	var wg sync.WaitGroup
	for _, c := range r.members {
		if m := c.mgr.Load(); m != nil {
			wg.Go(m.Close)
		}
	}
	wg.Wait()
}
