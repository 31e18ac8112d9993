package worker

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// workerMetrics are a worker's Prometheus metrics (docs/metrics.md),
// curried with its queue.
type workerMetrics struct {
	items           *prometheus.CounterVec // by outcome
	panics          prometheus.Counter
	duration        prometheus.Observer
	renewals        prometheus.Counter
	renewalFailures prometheus.Counter
	inFlight        prometheus.Gauge
}

// Outcomes of styx_worker_items_total; every item the worker leased ends in
// exactly one.
var outcomes = []string{"completed", "retried", "dead", "released", "lost"}

// newMetrics registers the worker metrics on reg (nil: not registered).
// Collectors another worker registered on reg already are shared.
func newMetrics(reg prometheus.Registerer, queue string) (*workerMetrics, error) {
	items := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "styx_worker_items_total",
		Help: "Items a worker finished, by outcome: completed, retried (requeued or scheduled after a handler error), dead (dead-lettered or dropped), released (given back unstarted at shutdown) or lost (lease lost before the acknowledgement).",
	}, []string{"queue", "outcome"})
	panics := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "styx_worker_panics_total",
		Help: "Handler panics the worker recovered (each also counted in styx_worker_items_total by what became of the item).",
	}, []string{"queue"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "styx_worker_handler_duration_seconds",
		Help:    "Time a handler took per item, in seconds.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, []string{"queue"})
	renewals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "styx_worker_lease_renewals_total",
		Help: "Leases the worker renewed.",
	}, []string{"queue"})
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "styx_worker_lease_renewal_failures_total",
		Help: "Lease renewals that failed (retried while the lease lasts; a refused one cancels the handler).",
	}, []string{"queue"})
	inFlight := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "styx_worker_items_in_flight",
		Help: "Items the worker holds a lease on: prefetched, running or being acknowledged.",
	}, []string{"queue"})
	if reg != nil {
		var err error
		items = register(reg, items, &err)
		panics = register(reg, panics, &err)
		duration = register(reg, duration, &err)
		renewals = register(reg, renewals, &err)
		failures = register(reg, failures, &err)
		inFlight = register(reg, inFlight, &err)
		if err != nil {
			return nil, err
		}
	}
	m := &workerMetrics{
		items:           items.MustCurryWith(prometheus.Labels{"queue": queue}),
		panics:          panics.WithLabelValues(queue),
		duration:        duration.WithLabelValues(queue),
		renewals:        renewals.WithLabelValues(queue),
		renewalFailures: failures.WithLabelValues(queue),
		inFlight:        inFlight.WithLabelValues(queue),
	}
	// Every series exists from the start, so rate() sees the first event.
	for _, o := range outcomes {
		m.items.WithLabelValues(o)
	}
	return m, nil
}

// register registers c on reg and returns it, or the collector of the same
// description registered before (another worker's). After a failure (set
// in *err) it does nothing.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, err *error) C {
	if *err != nil {
		return c
	}
	e := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(e, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	*err = e
	return c
}
