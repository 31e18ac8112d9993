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
		{postgres.Durability{SynchronousCommit: "on", StandbyNames: "FIRST 1 (s1, s2)", Standbys: 2}, "when a synchronous standby is promoted (sync_state 'sync' in pg_stat_replication, not 'potential')", false},
		{postgres.Durability{SynchronousCommit: "on", StandbyNames: "2 (s1, s2, s3)", Standbys: 3}, "on 2 synchronous standbys", false},
		{postgres.Durability{SynchronousCommit: "remote_apply", StandbyNames: "ANY 1 (s1, s2)", Standbys: 2},
			"flushed and applied on any one of the standbys listed in synchronous_standby_names = 'ANY 1 (s1, s2)' (quorum commit), not on each: " +
				"it survives the loss of the primary only when the most caught-up listed standby is promoted (the highest pg_last_wal_receive_lsn(), checked on each)", false},
		{postgres.Durability{SynchronousCommit: "on", StandbyNames: "any 2 (s1, s2, s3)", Standbys: 3}, "on any 2 of the standbys", false},
		{postgres.Durability{SynchronousCommit: "on", StandbyNames: "ANY 2 (s1, s2)", Standbys: 2}, "every standby listed in synchronous_standby_names = 'ANY 2 (s1, s2)': it survives the loss of the primary when any of them is promoted", false},
		{postgres.Durability{SynchronousCommit: "remote_write", StandbyNames: "ANY 1 (s1, s2)", Standbys: 2}, "most caught-up listed standby is promoted", false},
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

	for _, c := range []struct {
		d    postgres.Durability
		want int
	}{
		{postgres.Durability{SynchronousCommit: "on"}, 0},
		{postgres.Durability{SynchronousCommit: "on", StandbyNames: "s1, s2"}, 1},
		{postgres.Durability{SynchronousCommit: "remote_write", StandbyNames: "ANY 2 (s1, s2, s3)"}, 2},
		{postgres.Durability{SynchronousCommit: "local", StandbyNames: "ANY 2 (s1, s2, s3)"}, 0},
		{postgres.Durability{SynchronousCommit: "off", StandbyNames: "s1"}, 0},
	} {
		require.Equal(t, c.want, c.d.StandbysRequired(), "%+v", c.d)
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

// TestParseStandbyNames reads synchronous_standby_names as PostgreSQL's
// grammar does: priority (a plain list, n (…), FIRST n (…)) or quorum
// (ANY n (…)), keywords in any case, quoted names, and refuses what
// PostgreSQL refuses.
func TestParseStandbyNames(t *testing.T) {
	for _, c := range []struct {
		in   string
		want postgres.StandbyNames
	}{
		{"", postgres.StandbyNames{}},
		{"  ", postgres.StandbyNames{}},
		{"s1", postgres.StandbyNames{Num: 1, Names: []string{"s1"}}},
		{"s1, s2", postgres.StandbyNames{Num: 1, Names: []string{"s1", "s2"}}},
		{"*", postgres.StandbyNames{Num: 1, Names: []string{"*"}}},
		{"2 (s1, s2, s3)", postgres.StandbyNames{Num: 2, Names: []string{"s1", "s2", "s3"}}},
		{"FIRST 1 (s1, s2)", postgres.StandbyNames{Num: 1, Names: []string{"s1", "s2"}}},
		{"first 2(s1,s2)", postgres.StandbyNames{Num: 2, Names: []string{"s1", "s2"}}},
		{"ANY 1 (s1, s2)", postgres.StandbyNames{Quorum: true, Num: 1, Names: []string{"s1", "s2"}}},
		{"Any 3 (*)", postgres.StandbyNames{Quorum: true, Num: 3, Names: []string{"*"}}},
		{`ANY 1 ("any", "my ""quoted"" one", 2)`, postgres.StandbyNames{Quorum: true, Num: 1, Names: []string{"any", `my "quoted" one`, "2"}}},
		{"1, 2", postgres.StandbyNames{Num: 1, Names: []string{"1", "2"}}},
	} {
		got, err := postgres.ParseStandbyNames(c.in)
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
	for _, in := range []string{"ANY (s1)", "ANY 0 (s1)", "FIRST 1 s1", "ANY 1 (s1", "ANY 1 ()", "s1,", ", s1", "s1 s2",
		"ANY 1 (s1, any)", `"s1`, "1 (s1) s2"} {
		_, err := postgres.ParseStandbyNames(in)
		require.Error(t, err, in)
	}

	s, _ := postgres.ParseStandbyNames("ANY 2 (s1, s2)")
	require.True(t, s.Every())
	require.Equal(t, "ANY", s.Method())
	s, _ = postgres.ParseStandbyNames("ANY 2 (*)")
	require.False(t, s.Every())
	s, _ = postgres.ParseStandbyNames("s1, s2")
	require.False(t, s.Every())
	require.Equal(t, "FIRST", s.Method())
}
