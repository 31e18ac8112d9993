// Package metrics holds every Prometheus metric Styx exports, by name, in one
// place. docs/metrics.md documents them. Names follow
// styx_<subsystem>_<name>_<unit>; only counters end in _total.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// Metrics is the set of collectors of one server. Create it with New; every
// field is safe for concurrent use.
type Metrics struct {
	// Registry is the registry every collector below is registered with;
	// transport serves it on GET /metrics.
	Registry *prometheus.Registry

	// Requests counts API requests by path and HTTP status code.
	Requests *prometheus.CounterVec
	// RequestSeconds is the latency of API requests by path, in seconds.
	RequestSeconds *prometheus.HistogramVec

	// DeadLettered counts items moved to a dead-letter queue, by source
	// queue, dead-letter queue and reason (max_attempts, expired, explicit).
	DeadLettered *prometheus.CounterVec
	// ItemsDropped counts dead items deleted because their queue has no
	// dead-letter queue (and dead-letter queue items deleted at the end of
	// their retention), by queue and reason.
	ItemsDropped *prometheus.CounterVec
	// DeadLetterErrors counts failed writes to a dead-letter queue, by
	// source queue. Each failed move is retried.
	DeadLetterErrors *prometheus.CounterVec
	// RedriveItems counts dead items handled by redrive tasks, by
	// dead-letter queue, destination queue and result (moved, failed,
	// skipped).
	RedriveItems *prometheus.CounterVec
	// RedriveRunning is the number of running redrive tasks by
	// dead-letter queue (0 or 1).
	RedriveRunning *prometheus.GaugeVec
	// ItemAttempts is the distribution of attempts an item had when it was
	// completed or dead-lettered, by outcome (completed, dead_lettered,
	// dropped).
	ItemAttempts *prometheus.HistogramVec
	// LoopPanics counts panics recovered in a queue's loop, by queue: each
	// failed its iteration's requests (453) and reloaded the queue from
	// storage. Any increase is a bug to report.
	LoopPanics *prometheus.CounterVec
	// StorageFaults counts storage faults that made the store refuse
	// writes, by cause (write, sync, panic, space: the free-space
	// watermark). See styx_storage_read_only.
	StorageFaults *prometheus.CounterVec
	// StorageSyncSeconds is the duration, in seconds, of each successful
	// fsync of the Pebble store's write-ahead log (ObserveStorageSync).
	// It is exported as the histogram styx_storage_sync_seconds and its
	// count as the counter styx_storage_syncs_total, both read from one
	// snapshot at each scrape, so that the two always agree. Both stay 0
	// on the memory and PostgreSQL backends, which never sync a log of
	// Styx's.
	StorageSyncSeconds prometheus.Histogram

	// postgres exports the PostgreSQL primary's replication state and
	// commit waits (postgres.go: ObservePostgres).
	postgres *postgresCollector

	// arrivals are the listeners of dead items' arrivals by error group
	// (arrivals.go: OnDeadArrival, DeadArrived).
	arrivals listeners[DeadArrival]
	// outcomes are the listeners of redriven items' outcomes
	// (redriveoutcomes.go: OnRedriveOutcome, RedriveOutcomes).
	outcomes listeners[RedriveOutcome]
}

// QueueSample is one queue's state at one moment, for the gauges.
type QueueSample struct {
	Queue     string
	Ready     int
	Leased    int
	Scheduled int
	// OldestAge is the age of the queue's oldest item; 0 when empty.
	OldestAge time.Duration
	// DeduplicationIDs is the number of deduplication ids the queue holds
	// in memory (ended windows not yet forgotten included), exported as
	// styx_queue_deduplication_ids when InMemoryDeduplication is set: on
	// the memory and Pebble backends, not on PostgreSQL, which keeps its
	// ids in its table.
	DeduplicationIDs      int
	InMemoryDeduplication bool
	// ExpiringDeadItems counts the dead items the queue holds (as a
	// dead-letter queue), not leased, whose retention ends within 24 hours
	// (queue.Stats.ExpiringWithinDay): styx_dead_items_expiring_within_day.
	ExpiringDeadItems int
	// Paused reports the queue's consumption paused (queues.pause) in the
	// definition this node applies: styx_queue_paused.
	Paused bool
}

var (
	queueItemsDesc = prometheus.NewDesc("styx_queue_items",
		"Items in a queue by state (ready, leased, scheduled); a dead-letter queue's depth is its sum.",
		[]string{"queue", "state"}, nil)
	oldestAgeDesc = prometheus.NewDesc("styx_queue_oldest_item_age_seconds",
		"Age of the oldest item in a queue, in seconds; 0 when the queue is empty.",
		[]string{"queue"}, nil)
	expiringDeadDesc = prometheus.NewDesc("styx_dead_items_expiring_within_day",
		"Dead items a dead-letter queue holds (not leased) that its retention deletes within 24 hours; 0 on other queues.",
		[]string{"queue"}, nil)
	dedupIDsDesc = prometheus.NewDesc("styx_queue_deduplication_ids",
		"Deduplication ids a queue holds in memory, within their window or ended and not yet forgotten (memory and Pebble backends; bounded per queue, by default to 100,000).",
		[]string{"queue"}, nil)
	pausedDesc = prometheus.NewDesc("styx_queue_paused",
		"1 while a queue's consumption is paused (queues.pause: leases get nothing) in the definition this node applies, else 0.",
		[]string{"queue"}, nil)
)

// queueCollector reports the queue gauges from a sampler at scrape time.
type queueCollector struct {
	sample func() []QueueSample
}

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueItemsDesc
	ch <- oldestAgeDesc
	ch <- dedupIDsDesc
	ch <- expiringDeadDesc
	ch <- pausedDesc
}

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.sample() {
		ch <- prometheus.MustNewConstMetric(queueItemsDesc, prometheus.GaugeValue, float64(s.Ready), s.Queue, "ready")
		ch <- prometheus.MustNewConstMetric(queueItemsDesc, prometheus.GaugeValue, float64(s.Leased), s.Queue, "leased")
		ch <- prometheus.MustNewConstMetric(queueItemsDesc, prometheus.GaugeValue, float64(s.Scheduled), s.Queue, "scheduled")
		ch <- prometheus.MustNewConstMetric(oldestAgeDesc, prometheus.GaugeValue, s.OldestAge.Seconds(), s.Queue)
		ch <- prometheus.MustNewConstMetric(expiringDeadDesc, prometheus.GaugeValue, float64(s.ExpiringDeadItems), s.Queue)
		if s.InMemoryDeduplication {
			ch <- prometheus.MustNewConstMetric(dedupIDsDesc, prometheus.GaugeValue, float64(s.DeduplicationIDs), s.Queue)
		}
		paused := 0.0
		if s.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, paused, s.Queue)
	}
}

// CountStorageFault counts a storage fault by cause (styx_storage_faults_total).
func (m *Metrics) CountStorageFault(cause string) { m.StorageFaults.WithLabelValues(cause).Inc() }

// ObserveStorageSync records one successful fsync of the write-ahead log
// that took d (styx_storage_syncs_total, styx_storage_sync_seconds): one
// histogram Observe, a few atomic adds. Safe for concurrent use.
func (m *Metrics) ObserveStorageSync(d time.Duration) { m.StorageSyncSeconds.Observe(d.Seconds()) }

var (
	storageSyncsDesc = prometheus.NewDesc("styx_storage_syncs_total",
		"Successful fsyncs of the write-ahead log (Pebble backend; 0 on memory and PostgreSQL).", nil, nil)
	storageSyncSecondsDesc = prometheus.NewDesc("styx_storage_sync_seconds",
		"Duration of each successful fsync of the write-ahead log, in seconds (Pebble backend).", nil, nil)
)

// syncBuckets are styx_storage_sync_seconds' buckets, in seconds: 50 µs to
// 1 s (an fsync on an NVMe disk takes about 0.2 ms, on a cloud volume a few
// milliseconds).
var syncBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1}

// syncCollector exports the histogram h as styx_storage_sync_seconds and
// its count as styx_storage_syncs_total, both from one snapshot (h.Write):
// the counter equals the histogram's count at every scrape, and an fsync
// costs only h.Observe.
type syncCollector struct{ h prometheus.Histogram }

func (c syncCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storageSyncsDesc
	ch <- storageSyncSecondsDesc
}

func (c syncCollector) Collect(ch chan<- prometheus.Metric) {
	var m dto.Metric
	if err := c.h.Write(&m); err != nil {
		ch <- prometheus.NewInvalidMetric(storageSyncSecondsDesc, err)
		return
	}
	h := m.GetHistogram()
	buckets := make(map[float64]uint64, len(h.GetBucket()))
	for _, b := range h.GetBucket() {
		buckets[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	ch <- prometheus.MustNewConstMetric(storageSyncsDesc, prometheus.CounterValue, float64(h.GetSampleCount()))
	ch <- prometheus.MustNewConstHistogram(storageSyncSecondsDesc, h.GetSampleCount(), h.GetSampleSum(), buckets)
}

// RegisterStorageHealth registers the gauges styx_storage_read_only and
// styx_storage_low_space, read from health at each scrape. Call it once.
func (m *Metrics) RegisterStorageHealth(health func() (readOnly, lowSpace bool)) {
	gauge := func(name, help string, pick func(ro, low bool) bool) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if pick(health()) {
				return 1
			}
			return 0
		})
	}
	m.Registry.MustRegister(
		gauge("styx_storage_read_only", "1 while the store refuses every write (a failed write or sync, or opened on a full disk), else 0.",
			func(ro, _ bool) bool { return ro }),
		gauge("styx_storage_low_space", "1 while the free space is below the watermark (produces refused), else 0.",
			func(_, low bool) bool { return low }),
	)
}

// RegisterAdmission registers the gauges of the request pipeline's
// admission (issue 48), read at each scrape: styx_http_inflight_bytes (the
// in-flight budget charged now: request bodies and answers being written),
// styx_http_inflight_holders (the keys, or client addresses, holding a
// charge) and styx_http_connections_open; and returns the counter
// styx_http_connections_refused_total to count connections refused because
// every connection in the way was busy. Call it once.
func (m *Metrics) RegisterAdmission(inflight func() (bytes int64, holders int), open func() int) prometheus.Counter {
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "styx_http_connections_refused_total",
		Help: "Connections answered 503 and closed at once: the connection limits were reached and no connection was idle."})
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "styx_http_inflight_bytes",
			Help: "Bytes of the in-flight budget charged now: request bodies and answers being written (--max-inflight-bytes)."},
			func() float64 { b, _ := inflight(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "styx_http_inflight_holders",
			Help: "API keys (client addresses without --auth) holding a charge of the in-flight budget now."},
			func() float64 { _, h := inflight(); return float64(h) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "styx_http_connections_open",
			Help: "Open connections to the API listener, idle ones included (--max-connections)."},
			func() float64 { return float64(open()) }),
		refused,
	)
	return refused
}

// RegisterQueueSampler registers the gauges styx_queue_items,
// styx_queue_oldest_item_age_seconds, styx_queue_deduplication_ids and
// styx_queue_paused,
// read from sample at each scrape.
// Call it once.
func (m *Metrics) RegisterQueueSampler(sample func() []QueueSample) {
	m.Registry.MustRegister(queueCollector{sample: sample})
}

// Label values that every queue's series are created with (the dead
// reasons and the redrive results), so that they exist at 0 before the first
// event: rate() and dashboards see a counter from the start
// (Prometheus' instrumentation guidance).
var (
	deadReasons    = []string{"max_attempts", "expired", "explicit"}
	redriveResults = []string{"moved", "failed", "skipped"}
	// Outcomes of styx_item_attempts.
	attemptOutcomes = []string{"completed", "dead_lettered", "dropped"}
)

// InitQueue creates, at 0, the series of queue's counters: drops and
// dead-letter errors by queue and, when deadQueue is set, the moves to it by
// reason, its redrives back to queue by result and its running-redrive
// gauge. Idempotent; call it when a queue is created or loaded and when its
// dead_queue changes. Costs O(1) per queue: nothing is recounted at scrape
// time.
func (m *Metrics) InitQueue(queue, deadQueue string) {
	for _, r := range deadReasons {
		m.ItemsDropped.WithLabelValues(queue, r)
	}
	m.DeadLetterErrors.WithLabelValues(queue)
	m.LoopPanics.WithLabelValues(queue)
	if deadQueue == "" {
		return
	}
	for _, r := range deadReasons {
		m.DeadLettered.WithLabelValues(queue, deadQueue, r)
	}
	for _, r := range redriveResults {
		m.RedriveItems.WithLabelValues(deadQueue, queue, r)
	}
	m.RedriveRunning.WithLabelValues(deadQueue)
}

// ForgetQueue deletes every series labelled with queue (as the queue, the
// source or the dead-letter queue): called when the queue is deleted.
func (m *Metrics) ForgetQueue(queue string) {
	m.ItemsDropped.DeletePartialMatch(prometheus.Labels{"queue": queue})
	m.DeadLetterErrors.DeletePartialMatch(prometheus.Labels{"queue": queue})
	m.LoopPanics.DeletePartialMatch(prometheus.Labels{"queue": queue})
	m.DeadLettered.DeletePartialMatch(prometheus.Labels{"queue": queue})
	m.DeadLettered.DeletePartialMatch(prometheus.Labels{"dead_queue": queue})
	m.RedriveItems.DeletePartialMatch(prometheus.Labels{"queue": queue})
	m.RedriveItems.DeletePartialMatch(prometheus.Labels{"dead_queue": queue})
	m.RedriveRunning.DeletePartialMatch(prometheus.Labels{"dead_queue": queue})
}

// InitPaths creates, at 0, the request series of every API path with code
// 200, so a fresh server lists both request families.
func (m *Metrics) InitPaths(paths []string) {
	for _, p := range paths {
		m.Requests.WithLabelValues(p, "200")
		m.RequestSeconds.WithLabelValues(p)
	}
}

// New creates and registers every collector, plus the Go runtime and process
// collectors, on a new registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "styx_http_requests_total",
			Help: "API requests by path and HTTP status code.",
		}, []string{"path", "code"}),
		RequestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "styx_http_request_duration_seconds",
			Help:    "API request latency by path, in seconds (a lease includes its long-poll wait).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"path"}),
		DeadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "styx_dead_lettered_total",
			Help: "Items moved to a dead-letter queue, by source queue, dead-letter queue and reason.",
		}, []string{"queue", "dead_queue", "reason"}),
		ItemsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "styx_items_dropped_total",
			Help: "Dead items deleted because their queue has no dead-letter queue, and dead-letter queue items deleted at the end of their retention.",
		}, []string{"queue", "reason"}),
		DeadLetterErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "styx_dead_letter_errors_total",
			Help: "Failed writes to a dead-letter queue, by source queue; each is retried.",
		}, []string{"queue"}),
		RedriveItems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "styx_redrive_items_total",
			Help: "Dead items handled by redrive tasks, by dead-letter queue, destination queue and result (moved, failed, skipped).",
		}, []string{"dead_queue", "queue", "result"}),
		RedriveRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "styx_redrive_tasks_running",
			Help: "Running redrive tasks by dead-letter queue.",
		}, []string{"dead_queue"}),
		ItemAttempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "styx_item_attempts",
			Help:    "Attempts an item had when it was completed or dead-lettered, by outcome (completed, dead_lettered, dropped).",
			Buckets: []float64{1, 2, 3, 5, 10, 20, 50, 100},
		}, []string{"outcome"}),
	}
	m.LoopPanics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "styx_queue_loop_panics_total",
		Help: "Panics recovered in a queue's loop, by queue; each failed its iteration's requests (453) and reloaded the queue.",
	}, []string{"queue"})
	m.StorageFaults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "styx_storage_faults_total",
		Help: "Storage faults that made the store refuse writes, by cause (write, sync, panic, space).",
	}, []string{"cause"})
	// Not registered itself: syncCollector exports it with its count.
	m.StorageSyncSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "styx_storage_sync_seconds", Help: "unused: see storageSyncSecondsDesc", Buckets: syncBuckets,
	})
	m.postgres = &postgresCollector{waitSeconds: map[string]float64{}}
	for _, o := range attemptOutcomes {
		m.ItemAttempts.WithLabelValues(o)
	}
	for _, c := range []string{"write", "sync", "panic", "space"} {
		m.StorageFaults.WithLabelValues(c)
	}
	reg.MustRegister(
		m.Requests, m.RequestSeconds, m.DeadLettered, m.ItemsDropped, m.DeadLetterErrors, m.RedriveItems, m.RedriveRunning, m.ItemAttempts, m.LoopPanics, m.StorageFaults,
		syncCollector{m.StorageSyncSeconds},
		m.postgres,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}
