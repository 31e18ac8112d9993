package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/styxq/styx/internal/backend/clusters"
)

// validateClusters checks PostgresClusters and PostgresClusterWeights
// (ADR 0023), naming the setting.
func (c *Config) validateClusters() error {
	if len(c.PostgresClusters) == 0 {
		if len(c.PostgresClusterWeights) > 0 {
			return errors.New("postgres_cluster_weights: set, but there are no postgres_clusters")
		}
		return nil
	}
	if c.Storage != StoragePostgres {
		return fmt.Errorf("postgres_clusters: set, but storage is %q; they apply to storage %q", c.Storage, StoragePostgres)
	}
	if c.PostgresURL == "" {
		return fmt.Errorf("postgres_url: required with postgres_clusters: it is the cluster %q, which holds the catalog", clusters.Main)
	}
	if _, ok := c.PostgresClusters[clusters.Main]; ok {
		return fmt.Errorf("postgres_clusters: %q is the cluster of postgres_url; name the others", clusters.Main)
	}
	for name := range c.PostgresClusterWeights {
		if _, ok := c.PostgresClusters[name]; !ok && name != clusters.Main {
			return fmt.Errorf("postgres_cluster_weights: %q is not a cluster (%s)", name, joinNames(c.clusterList()))
		}
	}
	return clusters.Check(c.clusterList())
}

// clusterList is the clusters of the configuration, main first.
func (c *Config) clusterList() []clusters.Cluster {
	weight := func(name string) int {
		if w, ok := c.PostgresClusterWeights[name]; ok {
			return w
		}
		return 1
	}
	out := []clusters.Cluster{{Name: clusters.Main, URL: c.PostgresURL, Weight: weight(clusters.Main)}}
	names := make([]string, 0, len(c.PostgresClusters))
	for name := range c.PostgresClusters {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		out = append(out, clusters.Cluster{Name: name, URL: c.PostgresClusters[name], Weight: weight(name)})
	}
	return out
}

func joinNames(cs []clusters.Cluster) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return fmt.Sprint(slices.Clip(names))
}

// startClusters starts a node over several PostgreSQL clusters (ADR 0023):
// the router serves the queues; main's store keeps the API keys, the
// redrive tasks and the activity log, and each queue's history and SQS
// FIFO records stay on its home cluster (clusters.Stores).
func (d *Daemon) startClusters(ctx context.Context) (*Daemon, error) {
	r, err := clusters.Open(ctx, clusters.Config{Clusters: d.cfg.clusterList(), MaxConns: d.cfg.PostgresMaxConns,
		Clock: d.cfg.Clock, Log: d.cfg.Log, Metrics: d.Metrics})
	if err != nil {
		return nil, fmt.Errorf("open storage: %w", err)
	}
	st := r.Main().Store()
	return d.serve(ctx, r, st, st, r.Stores(), st)
}
