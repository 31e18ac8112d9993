package postgres

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// Defaults of Config.
const (
	DefaultStatementTimeout = 5 * time.Second
	DefaultRefreshInterval  = time.Second
)

// ItemAllowance is how much longer than Config.StatementTimeout a loop
// transaction may take per item its requests carry (engine.Request.Items):
// 10 s more for a 10,000-item import, 1 s for a 1,000-item produce. Such a
// transaction takes about 0.05 ms per item on an idle test machine; the
// allowance leaves room for a loaded one, and a stalled database is still
// found within seconds for the small requests that most iterations carry.
const ItemAllowance = time.Millisecond

// Config configures a Manager.
type Config struct {
	// URL is the database's connection string (pgx syntax). Required.
	URL string
	// MaxConns bounds the connection pool; 0 means pgx's default
	// (max(4, number of CPUs)).
	MaxConns int32
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Metrics
	// StatementTimeout bounds one loop transaction, so that a request
	// never waits on a stalled database past it (453), plus ItemAllowance
	// per item the transaction's requests carry; default 5s.
	StatementTimeout time.Duration
	// RefreshInterval is how often the node re-reads the queue
	// definitions and the earliest lifecycle time of every queue (the
	// fallback when a notification is missed); default 1s.
	RefreshInterval time.Duration
	// Cluster names the cluster this Manager runs against, for the
	// cluster field of queues.create (queue.CheckCluster): a create naming
	// another is refused (400 naming cluster). "" means "main", the one
	// cluster of a deployment with one (ADR 0023).
	Cluster string
	// Others returns the definitions of the queues on the other clusters
	// of a deployment with several (ADR 0023), by name. The admin step
	// (create, update, delete) merges them into the stored definitions it
	// checks, under its lock, so that the dead-letter rules (a dead_queue
	// exists and has none of its own, a queue named as a dead_queue is not
	// deleted) and the uniqueness of names hold across clusters; an error
	// it returns aborts the step. Nil means none (one cluster).
	Others func(ctx context.Context) (map[string]queue.QueueInfo, error)
	// NoReplicationGauges keeps the replication samples (replication.go)
	// out of the styx_postgres_* gauges, which have one series per node:
	// a node over several clusters exports its catalog cluster's (ADR
	// 0023). The samples are still taken and a change of the guarantee
	// still logged. Default false (the gauges are this Manager's).
	NoReplicationGauges bool
	// OnChange, when set, is called on the LISTEN goroutine each time a
	// notification that the queue definitions changed arrives (payload
	// "c"), so that the router of several clusters re-reads its placements
	// (internal/backend/clusters). It must not block.
	OnChange func()
	// DeadLetters delivers dead items to dead-letter queues that this
	// Manager does not hold (another cluster's; ADR 0023): set, a dead
	// item whose queue's dead_queue is not a queue of this Manager takes
	// the two-phase move (deadletters.go). Nil: every dead-letter queue
	// must be this Manager's (the one-statement move, docs/storage/
	// postgres.md "How a node works", step 5).
	DeadLetters DeadLetters
	// TwoPhaseDeadLetters makes every dead-letter move take the two-phase
	// path, the Manager delivering to its own dead-letter queues when
	// DeadLetters is nil: the tests of that path on one cluster. Off by
	// default (one statement is cheaper and has no crash window).
	TwoPhaseDeadLetters bool
}

// Manager is this node's view of the queues in the database: it implements
// queue.Queues, runs one Queue loop per queue, listens for notifications
// (items ready, queue definitions changed) and re-reads the definitions
// every RefreshInterval. Queue administration is serialized across nodes by
// an advisory lock, so the dead-letter rules hold cluster-wide.
//
// Locks: mu guards the maps; it is never held while calling into a loop or
// the database.
type Manager struct {
	cfg     Config
	st      *Store
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	refresh chan struct{}

	mu     sync.RWMutex
	infos  map[uint64]queue.QueueInfo
	names  map[string]uint64
	queues map[uint64]*Queue
	// gen counts what this node learns of a queue outside reload (adopt,
	// and its own Delete); learned holds the gen at which each queue was
	// last adopted or deleted here, so that a reload whose read began
	// earlier neither forgets a queue created since, nor reverts a newer
	// definition, nor brings back a queue deleted since (its read saw the
	// row before the delete committed).
	gen     uint64
	learned map[uint64]uint64
	// reloading serializes reloads, so that they apply in the order of
	// their reads: a reload forgets the deletions its read began after
	// (applyQueues), which an older read applied later would undo.
	reloading sync.Mutex
	closed    bool
	// health caches Health's answer; guarded by its own mutex.
	health health
	// durability is what an acknowledgement is worth, read at Open;
	// never changed after.
	durability Durability
	// node names this node's rows of styx_consumers (consumers.go): random,
	// set at Open.
	node string
	// notifier sends this node's wake-ups to the other nodes (wakeup.go).
	notifier *notifier
	// taken is the dead-letter queues' side of two-phase moves
	// (deadletters.go): their partition cursors and dedup sweeps.
	taken takenDead
}

var _ queue.Queues = (*Manager)(nil)

// Open connects, migrates the schema and starts a loop for every queue.
func Open(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.StatementTimeout <= 0 {
		cfg.StatementTimeout = DefaultStatementTimeout
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	st, err := OpenStore(ctx, cfg.URL, cfg.MaxConns)
	if err != nil {
		return nil, err
	}
	st.SetLog(cfg.Log) // a move of the item ids after a failover (ids.go)
	m := &Manager{cfg: cfg, st: st, refresh: make(chan struct{}, 1),
		infos: map[uint64]queue.QueueInfo{}, names: map[string]uint64{}, queues: map[uint64]*Queue{}, learned: map[uint64]uint64{},
		node: newNodeID()}
	m.notifier = newNotifier(m)
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if err := m.reload(ctx); err != nil {
		st.Close()
		return nil, err
	}
	m.durability = logDurability(ctx, st.pool, cfg.Log)
	m.wg.Go(m.listen)
	m.wg.Go(m.notifier.run)
	m.wg.Go(m.refresher)
	m.wg.Go(m.shareConsumers)
	m.wg.Go(m.watchReplication) // replication.go: the styx_postgres_* metrics
	return m, nil
}

// ClusterName is the name of the cluster the Manager runs against
// (Config.Cluster; "main" when not set).
func (m *Manager) ClusterName() string {
	if m.cfg.Cluster == "" {
		return "main"
	}
	return m.cfg.Cluster
}

// Durability returns the durability settings read (and logged) at Open;
// zero when they could not be read.
func (m *Manager) Durability() Durability { return m.durability }

// Store returns the catalog and task store (the redrive runner's TaskStore).
func (m *Manager) Store() *Store { return m.st }

func (m *Manager) cachedInfo(id uint64) (queue.QueueInfo, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	info, ok := m.infos[id]
	return info, ok
}

func (m *Manager) cachedInfoByName(name string) (queue.QueueInfo, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	id, ok := m.names[name]
	return m.infos[id], ok
}

// signalQueue wakes the loop of queue id, if this node runs one.
func (m *Manager) signalQueue(id uint64, ready bool, due int64) {
	m.mu.RLock()
	q := m.queues[id]
	m.mu.RUnlock()
	if q != nil {
		q.signal(ready, due)
	}
}

// reload re-reads every queue definition with the earliest lifecycle time
// of its items, starts loops for new queues, stops those of deleted ones and
// tells each loop when its lifecycle work is due.
func (m *Manager) reload(ctx context.Context) error {
	m.reloading.Lock()
	defer m.reloading.Unlock()
	gen, all, err := m.readQueues(ctx)
	if err != nil {
		return err
	}
	m.applyQueues(gen, all)
	return nil
}

// loadedQueue is a queue as readQueues found it.
type loadedQueue struct {
	info queue.QueueInfo
	due  int64
	// held says the queue holds groups (rule 5): its loop checks them.
	held bool
}

// readQueues reads every queue definition (reload), and returns it with
// the gen at which the read began.
func (m *Manager) readQueues(ctx context.Context) (uint64, []loadedQueue, error) {
	m.mu.RLock()
	gen := m.gen
	m.mu.RUnlock()
	rows, err := m.st.pool.Query(ctx, `SELECT `+queueColumns+`,
		coalesce((SELECT deadline FROM styx_items i WHERE i.queue_id=q.id AND i.state<>0 ORDER BY deadline LIMIT 1), 0),
		coalesce((SELECT expire_deadline FROM styx_items i WHERE i.queue_id=q.id AND i.state<>1 AND i.expire_deadline<>0
			ORDER BY expire_deadline LIMIT 1), 0),
		EXISTS (SELECT 1 FROM styx_held_groups h WHERE h.queue_id=q.id)
		FROM styx_queues q`)
	if err != nil {
		return 0, nil, wrap("load queues", err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (loadedQueue, error) {
		var q queueRow
		var timed, expiry int64
		var held bool
		err := r.Scan(append(q.dest(), &timed, &expiry, &held)...)
		return loadedQueue{info: q.info(), due: engine.Earliest(timed, expiry), held: held}, err
	})
	if err != nil {
		return 0, nil, wrap("load queues", err)
	}
	return gen, all, nil
}

// applyQueues makes the node's queues those of all, read from gen on
// (readQueues), but for what the node learned since (learned).
func (m *Manager) applyQueues(gen uint64, all []loadedQueue) {
	var stopped []*Queue
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	seen := make(map[uint64]bool, len(all))
	for _, l := range all {
		seen[l.info.ID] = true
		if m.learned[l.info.ID] > gen {
			continue // adopted or deleted since the read began: newer than l
		}
		m.resumed(l.info)
		m.infos[l.info.ID] = l.info
		m.cfg.Metrics.InitQueue(l.info.Name, l.info.DeadQueue)
		m.names[l.info.Name] = l.info.ID
		if m.queues[l.info.ID] == nil {
			m.queues[l.info.ID] = newQueue(m, l.info)
		}
	}
	for id, info := range m.infos {
		if !seen[id] && m.learned[id] <= gen {
			stopped = append(stopped, m.forget(id, info.Name)...)
		}
	}
	for id, g := range m.learned {
		if _, ok := m.infos[id]; !ok && g <= gen {
			delete(m.learned, id) // a deletion this read began after: it saw none of it
		}
	}
	queues := make(map[uint64]*Queue, len(m.queues))
	for id, q := range m.queues {
		queues[id] = q
	}
	m.mu.Unlock()
	for _, q := range stopped {
		go q.Loop.Stop(queue.NotFound(q.name)) // deleted on another node
	}
	for _, l := range all {
		q := queues[l.info.ID]
		if q != nil && l.held {
			q.heldHint.Store(true)
		}
		if q != nil && (l.due != 0 || l.held) {
			q.signal(false, l.due)
		}
	}
}

// resumed wakes the loop of info's queue to serve its waiting leases when
// info resumes what the cached definition paused (queues.resume, here or
// on another node), instead of leaving them to the next poll. Needs mu
// (it only reads the cache; signal takes no lock).
func (m *Manager) resumed(info queue.QueueInfo) {
	if old, ok := m.infos[info.ID]; ok && old.Paused() && !info.Paused() {
		if q := m.queues[info.ID]; q != nil {
			q.signal(true, 0)
		}
	}
}

// forget removes a queue from the maps and returns its loop to stop. Needs
// mu.
func (m *Manager) forget(id uint64, name string) []*Queue {
	m.cfg.Metrics.ForgetQueue(name)
	delete(m.infos, id)
	delete(m.learned, id)
	if m.names[name] == id {
		delete(m.names, name)
	}
	q := m.queues[id]
	delete(m.queues, id)
	if q == nil {
		return nil
	}
	return []*Queue{q}
}

// refresher re-reads the queue definitions every RefreshInterval, and at
// once when told to, and folds the item counts every countsFoldInterval.
func (m *Manager) refresher() {
	t := time.NewTicker(m.cfg.RefreshInterval)
	defer t.Stop()
	fold := time.NewTicker(countsFoldInterval)
	defer fold.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		case <-m.refresh:
		case <-fold.C:
			ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StatementTimeout)
			if _, err := m.foldCounts(ctx); err != nil && m.ctx.Err() == nil {
				m.cfg.Log.Warn("postgres: folding the item counts failed", "error", err)
			}
			cancel()
			continue
		}
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StatementTimeout)
		if err := m.reload(ctx); err != nil && m.ctx.Err() == nil {
			m.cfg.Log.Warn("postgres: reloading the queue definitions failed", "error", err)
		}
		cancel()
	}
}

func (m *Manager) requestRefresh() {
	select {
	case m.refresh <- struct{}{}:
	default:
	}
}

// listen holds one connection that LISTENs on the schema's channel and
// dispatches notifications: "c" (queue definitions changed), "i:<queue
// id>" (items may be ready) and "n:<node>" (a node's hello, wakeup.go). It reconnects with a back-off; after each
// (re)connection every loop looks for items, since notifications may have
// been missed.
func (m *Manager) listen() {
	backoff := 100 * time.Millisecond
	for m.ctx.Err() == nil {
		err := m.listenOnce()
		if m.ctx.Err() != nil {
			return
		}
		m.cfg.Log.Warn("postgres: LISTEN connection lost; reconnecting", "error", err, "in", backoff)
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

func (m *Manager) listenOnce() error {
	cfg := m.st.pool.Config().ConnConfig.Copy()
	// Its hellos' commits wait for no flush and no standby (wakeup.go).
	cfg.RuntimeParams["synchronous_commit"] = "off"
	conn, err := pgx.ConnectConfig(m.ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(m.ctx, "LISTEN "+pgx.Identifier{m.st.channel}.Sanitize()); err != nil {
		return err
	}
	// hello says this node is here (wakeup.go), now and every peerHello.
	var nextHello time.Time
	hello := func() error {
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StatementTimeout)
		defer cancel()
		_, err := conn.Exec(ctx, `SELECT pg_notify($1, $2)`, m.st.channel, helloPayload(m.node))
		nextHello = time.Now().Add(helloInterval())
		return err
	}
	if err := hello(); err != nil {
		return err
	}
	m.requestRefresh()
	m.mu.RLock()
	for _, q := range m.queues {
		q.signal(true, 0)
	}
	m.mu.RUnlock()
	for {
		wait, cancel := context.WithDeadline(m.ctx, nextHello)
		n, err := conn.WaitForNotification(wait)
		cancel()
		if err != nil {
			// The wait ran to the next hello: the connection is still
			// good (pgconn keeps it after a deadline).
			if m.ctx.Err() == nil && wait.Err() != nil && !conn.IsClosed() {
				if err := hello(); err != nil {
					return err
				}
				continue
			}
			return err
		}
		switch {
		case n.Payload == "c":
			m.requestRefresh()
			if m.cfg.OnChange != nil {
				m.cfg.OnChange()
			}
		case strings.HasPrefix(n.Payload, "n:"):
			if m.notifier.heard(n.Payload[2:]) {
				if err := hello(); err != nil {
					return err
				}
			}
		case strings.HasPrefix(n.Payload, "i:"):
			if n.PID == m.notifier.pid.Load() {
				continue // this node's own: its loops had it directly (wake)
			}
			if id, err := strconv.ParseUint(n.Payload[2:], 10, 64); err == nil {
				m.signalQueue(id, true, 0)
			}
		}
	}
}

// Get implements queue.Queues. A queue created on another node moments ago
// is looked up in the database.
func (m *Manager) Get(name string) (queue.Queue, error) {
	m.mu.RLock()
	q := m.queues[m.names[name]]
	m.mu.RUnlock()
	if q != nil {
		return q, nil
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StatementTimeout)
	defer cancel()
	info, err := m.Info(ctx, name)
	if err != nil {
		return nil, err
	}
	return m.adopt(info)
}

// adopt records a queue definition and returns its loop, starting it if
// needed.
func (m *Manager) adopt(info queue.QueueInfo) (*Queue, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, engine.ErrShuttingDown
	}
	m.gen++
	if old, ok := m.names[info.Name]; ok && old != info.ID {
		// Deleted and re-created under the same name: a reload that read
		// before does not bring the old one back either.
		for _, q := range m.forget(old, info.Name) {
			go q.Loop.Shutdown()
		}
		m.learned[old] = m.gen
	}
	m.learned[info.ID] = m.gen
	m.resumed(info)
	m.infos[info.ID] = info
	m.cfg.Metrics.InitQueue(info.Name, info.DeadQueue)
	m.names[info.Name] = info.ID
	q := m.queues[info.ID]
	if q == nil {
		q = newQueue(m, info)
		m.queues[info.ID] = q
	}
	return q, nil
}

// Info implements queue.Queues, from the database.
func (m *Manager) Info(ctx context.Context, name string) (queue.QueueInfo, error) {
	info, err := m.st.GetQueue(ctx, name)
	if errors.Is(err, store.ErrQueueNotFound) {
		return info, queue.NotFound(name)
	}
	return info, err
}

// List implements queue.Queues, from the database.
func (m *Manager) List(ctx context.Context, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	return m.st.ListQueues(ctx, p)
}

// admin is the manager's engine.Admin: a step is a transaction that holds
// the schema's admin lock (so concurrent changes on several nodes are
// checked one after the other), with every definition read under it, and
// tells the other nodes at commit.
func (m *Manager) admin(ctx context.Context, fn func(engine.Definitions, map[string]queue.QueueInfo) error) error {
	tx, err := m.st.pool.Begin(ctx)
	if err != nil {
		return wrap("queue admin", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }() // after the commit: does nothing
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('styx-admin:' || current_schema()))`); err != nil {
		return wrap("queue admin", err)
	}
	infos, err := listQueues(ctx, tx, queue.ListQueuesParams{})
	if err != nil {
		return wrap("queue admin", err)
	}
	all := make(map[string]queue.QueueInfo, len(infos))
	for _, i := range infos {
		all[i.Name] = i
	}
	if m.cfg.Others != nil {
		others, err := m.cfg.Others(ctx)
		if err != nil {
			return wrap("queue admin: the other clusters' queues", err)
		}
		for name, i := range others {
			if _, ok := all[name]; !ok {
				all[name] = i
			}
		}
	}
	if err := fn(txDefinitions{tx}, all); err != nil {
		return wrap("queue admin", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, 'c')`, m.st.channel); err != nil {
		return wrap("queue admin", err)
	}
	// commitTx: a change whose COMMIT's outcome is unknown (its wait for
	// the synchronous standby cancelled, say) is 453, never success.
	return wrap("queue admin", commitTx(ctx, tx, "queue admin"))
}

// txDefinitions are the queue definitions of an admin transaction.
type txDefinitions struct{ tx pgx.Tx }

func (d txDefinitions) CreateQueue(ctx context.Context, info queue.QueueInfo) (queue.QueueInfo, error) {
	return createQueue(ctx, d.tx, info)
}

func (d txDefinitions) UpdateQueue(ctx context.Context, info queue.QueueInfo) error {
	return updateQueue(ctx, d.tx, info)
}

func (d txDefinitions) DeleteQueue(ctx context.Context, name string) error {
	return deleteQueue(ctx, d.tx, name)
}

// Create implements queue.Queues (engine.CreateQueue); this node serves the
// queue at once, the others once notified.
func (m *Manager) Create(ctx context.Context, info queue.QueueInfo) error {
	if err := queue.CheckCluster(info.Cluster, []string{m.ClusterName()}); err != nil {
		return err
	}
	info.Cluster = ""
	info, err := engine.CreateQueue(ctx, m.admin, info, nil)
	if err != nil {
		return err
	}
	_, err = m.adopt(info)
	return err
}

// Update implements queue.Queues (engine.UpdateQueue).
func (m *Manager) Update(ctx context.Context, name string, change func(*queue.QueueInfo) error) error {
	info, err := engine.UpdateQueue(ctx, m.admin, name, change, nil)
	if err != nil {
		return err
	}
	_, err = m.adopt(info)
	return err
}

// Delete implements queue.Queues (engine.DeleteQueue): the queue's items go
// with it; this node stops its loop once the delete is committed.
func (m *Manager) Delete(ctx context.Context, name string) error {
	info, err := engine.DeleteQueue(ctx, m.admin, name, nil)
	if err != nil {
		return err
	}
	m.mu.Lock()
	stopped := m.forget(info.ID, name)
	m.gen++
	m.learned[info.ID] = m.gen // a reload that read before the delete does not bring it back
	m.mu.Unlock()
	for _, q := range stopped {
		q.Loop.Stop(queue.NotFound(name))
	}
	return nil
}

// Close stops the loops (finishing the requests they took), the listener
// and the refresher, and closes the pool.
func (m *Manager) Close() {
	engine.CloseAll(&m.mu, &m.closed, m.queues)
	m.cancel()
	m.wg.Wait()
	m.st.Close()
}
