package main

// Reading the server's Prometheus metrics (GET <endpoint>/metrics): the
// soak workload's goroutines (soak.go) and the fsyncs of the write-ahead
// log that every run reports (styx_storage_syncs_total).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// metricSyncs is the server's count of fsyncs of its write-ahead log
// (docs/metrics.md): Pebble's, 0 on the memory and PostgreSQL backends.
const metricSyncs = "styx_storage_syncs_total"

// parseSample returns the value after the first line of r that starts with
// one of prefixes: a Prometheus text sample without labels ("go_goroutines "
// with its space), or another line of that shape (pprof's "goroutine
// profile: total "). found is false when no line does; a value that is not
// a number is an error naming the prefix.
func parseSample(r io.Reader, prefixes ...string) (v float64, found bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range prefixes {
			if rest, ok := strings.CutPrefix(line, p); ok {
				v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				if err != nil {
					return 0, true, fmt.Errorf("%s: %w", strings.TrimSpace(p), err)
				}
				return v, true, nil
			}
		}
	}
	return 0, false, sc.Err()
}

// fetchMetrics GETs url (a /metrics page, or a pprof profile in text form)
// through hc, with apiKey as a bearer token when set, and hands the body
// to parse. A status other than 200 is an error.
func fetchMetrics(ctx context.Context, hc *http.Client, url, apiKey string, parse func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parse(resp.Body)
}

// storageSyncs returns styx_storage_syncs_total summed over the endpoints'
// /metrics; known is false when no endpoint exposes it (a server that is not
// Styx, or one older than the metric). An endpoint that does not answer its
// /metrics is an error.
func (b *bench) storageSyncs(ctx context.Context) (n int64, known bool, err error) {
	for _, e := range b.cfg.Endpoints {
		url := strings.TrimSuffix(e, "/") + "/metrics"
		err := fetchMetrics(ctx, b.metrics, url, b.cfg.APIKey, func(r io.Reader) error {
			v, found, err := parseSample(r, metricSyncs+" ")
			if found && err == nil {
				n += int64(v)
				known = true
			}
			return err
		})
		if err != nil {
			return 0, false, err
		}
	}
	return n, known, nil
}
