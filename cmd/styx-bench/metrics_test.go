package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStorageSyncs reads styx_storage_syncs_total from the endpoints'
// /metrics, summed, with the run's API key; a server without it is
// unknown, one that refuses /metrics an error.
func TestStorageSyncs(t *testing.T) {
	serve := func(status int, body string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" || r.Header.Get("Authorization") != "Bearer k" {
				http.Error(w, "no", http.StatusForbidden)
				return
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	styxText := func(n string) string {
		return "# HELP styx_storage_sync_seconds x\n# TYPE styx_storage_sync_seconds histogram\n" +
			"styx_storage_sync_seconds_count " + n + "\n# TYPE styx_storage_syncs_total counter\nstyx_storage_syncs_total " + n + "\n"
	}
	a, c := serve(http.StatusOK, styxText("12")), serve(http.StatusOK, styxText("3e+01"))
	other := serve(http.StatusOK, "go_goroutines 7\n")
	refused := serve(http.StatusNotFound, "")
	syncs := func(endpoints ...string) (int64, bool, error) {
		b := &bench{cfg: config{Endpoints: endpoints, APIKey: "k"}, metrics: http.DefaultClient}
		return b.storageSyncs(t.Context())
	}

	n, known, err := syncs(a, c+"/")
	require.NoError(t, err)
	assert.True(t, known)
	assert.EqualValues(t, 42, n, "summed over the endpoints")

	_, known, err = syncs(other)
	require.NoError(t, err)
	assert.False(t, known, "a server without the metric")

	_, _, err = syncs(a, refused)
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "404"), err)
}
