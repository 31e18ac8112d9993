package metrics

import "github.com/prometheus/client_golang/prometheus"

// RegisterActivity registers and returns the counter
// styx_activity_write_errors_total: audited calls whose activity record
// could not be stored (internal/activity; the call itself was done and
// answered, and its audit line and an ERROR line were logged). Call it
// once.
func (m *Metrics) RegisterActivity() prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "styx_activity_write_errors_total",
		Help: "Audited calls whose activity record could not be stored (the call was done and answered; logged at ERROR)."})
	m.Registry.MustRegister(c)
	return c
}
