package clusters

import (
	"sort"
	"strings"

	"github.com/styxq/styx/internal/store"
)

// State returns each cluster's health, by name: "" when it takes writes,
// else why not (postgres.Manager.Health's answer, or why it is not open).
func (r *Router) State() map[string]string {
	out := make(map[string]string, len(r.names))
	for _, name := range r.names {
		c := r.members[name]
		m, err := c.manager()
		if err != nil {
			out[name] = err.Error()
			continue
		}
		out[name] = m.Health()
	}
	return out
}

// Health says why the node can route nothing ("" when it can route some
// queue), for /health's 503 (ADR 0023): every cluster is down, or the
// catalog cluster is and no placement was ever read. One cluster down
// while another answers is Degraded, not this: a load balancer that
// drained every node for one cluster's outage would take every other
// queue down with it.
func (r *Router) Health() string {
	states := r.State()
	up := 0
	for _, why := range states {
		if why == "" {
			up++
		}
	}
	if up > 0 && (states[Main] == "" || r.isLoaded()) {
		return ""
	}
	return "no PostgreSQL cluster can take writes: " + describe(states)
}

// Degraded says which clusters cannot take writes ("" when every one
// can): /health then answers 200 "degraded: …", their queues 453.
func (r *Router) Degraded() string {
	states := r.State()
	for _, why := range states {
		if why != "" {
			return describe(states)
		}
	}
	return ""
}

// describe names each cluster that is down and why, in name order.
func describe(states map[string]string) string {
	var parts []string
	for name, why := range states {
		if why != "" {
			parts = append(parts, "cluster '"+name+"': "+why)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// sortMinutes orders history minutes by queue, minute and node, as
// store.HistoryStore.ReadHistory returns them.
func sortMinutes(ms []store.HistoryMinute) {
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if a.Queue != b.Queue {
			return a.Queue < b.Queue
		}
		if !a.At.Equal(b.At) {
			return a.At.Before(b.At)
		}
		return a.Node < b.Node
	})
}
