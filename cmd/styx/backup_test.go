package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
)

// offline runs a command that takes no client flags (restore, migrate).
func offline(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return out.String() + errOut.String(), err
}

// TestBackupRestoreMigrateCLI: styx backup writes a verified archive (and
// never over a file), styx restore writes it into an empty directory only,
// and styx migrate --from-backup copies it into PostgreSQL (when the test
// database is configured), twice without doubling.
func TestBackupRestoreMigrateCLI(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "jobs")
	c.ok("produce", "jobs", "a", "b", "c")
	file := filepath.Join(t.TempDir(), "styx.tar")
	out := c.ok("backup", file)
	require.Contains(t, out, "backup "+file)
	require.Contains(t, out, "store styx-store-2")
	_, _, err := c.run("backup", file)
	require.ErrorContains(t, err, "exists")
	_, err = os.Stat(file + ".partial")
	require.True(t, os.IsNotExist(err))

	dir := filepath.Join(t.TempDir(), "data")
	out, err = offline(t, "restore", file, "--data-dir", dir)
	require.NoError(t, err, out)
	require.Contains(t, out, "1 queues")
	out, err = offline(t, "restore", file, "--data-dir", dir)
	require.ErrorContains(t, err, "not empty", out)

	if os.Getenv(pgtest.EnvURL) == "" {
		t.Log("migrate left out: " + pgtest.EnvURL + " is not set")
		return
	}
	url := pgtest.URL(t)
	for range 2 {
		out, err = offline(t, "migrate", "--from-backup", file, "--to-postgres", url)
		require.NoError(t, err, out)
		require.Contains(t, out, "migrated 1 queues, 3 items")
	}
	require.Contains(t, out, "(0 new)")
}
