package postgres_test

import (
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/metrics"
)

// TestDurabilityGuarantee checks the sentence a node logs at start for each
// replication mode, and that a node reads its session's settings: the
// test database's defaults (synchronous_commit = on, no standby), then
// synchronous_commit = off set by the URL, logged as a warning.
func TestDurabilityGuarantee(t *testing.T) {
	for _, c := range []struct {
		d    postgres.Durability
		says string
		weak bool
	}{
		{postgres.Durability{SynchronousCommit: "on", StandbyNames: "s1", Standbys: 1}, "on a synchronous standby", false},
		{postgres.Durability{SynchronousCommit: "remote_apply", StandbyNames: "ANY 1 (s1, s2)", Standbys: 2}, "on a synchronous standby", false},
		{postgres.Durability{SynchronousCommit: "remote_write", StandbyNames: "s1", Standbys: 1}, "unless the standby's host crashes too", false},
		{postgres.Durability{SynchronousCommit: "local", StandbyNames: "s1", Standbys: 1}, "a failover may lose", true},
		{postgres.Durability{SynchronousCommit: "on", Standbys: 1}, "a failover may lose", true},
		{postgres.Durability{SynchronousCommit: "on"}, "no standby streams from it", false},
		{postgres.Durability{SynchronousCommit: "off", StandbyNames: "s1", Standbys: 1}, "lost by a crash of PostgreSQL", true},
	} {
		text, weak := c.d.Guarantee()
		require.Contains(t, text, c.says, "%+v", c.d)
		require.Equal(t, c.weak, weak, "%+v", c.d)
	}

	base := pgtest.URL(t)
	for _, c := range []struct {
		options string
		want    postgres.Durability
		level   string
	}{
		{"", postgres.Durability{SynchronousCommit: "on"}, "level=INFO"},
		{"-c synchronous_commit=off", postgres.Durability{SynchronousCommit: "off"}, "level=WARN"},
	} {
		u := base
		if c.options != "" { // pgx reads '+' as itself, not a space
			u += "&options=" + strings.ReplaceAll(url.QueryEscape(c.options), "+", "%20")
		}
		var logs strings.Builder
		m, err := postgres.Open(t.Context(), postgres.Config{URL: u, Metrics: metrics.New(),
			Log: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		m.Close()
		require.Equal(t, c.want, m.Durability())
		text, _ := c.want.Guarantee()
		require.Contains(t, logs.String(), c.level+` msg="postgres: `+text)
		require.Contains(t, logs.String(), "synchronous_commit="+c.want.SynchronousCommit)
	}
}
