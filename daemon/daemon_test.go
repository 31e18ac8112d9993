package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
)

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  daemon.Config
		want string
	}{
		{"Listen", daemon.Config{Listen: "nohostport"}, "listen"},
		{"Storage", daemon.Config{Storage: "floppy"}, "storage"},
		{"MaxRequestBytes", daemon.Config{MaxRequestBytes: 10}, "max_request_bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.SetDefaults()
			err := c.cfg.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
		})
	}
	var ok daemon.Config
	ok.SetDefaults()
	require.NoError(t, ok.Validate())
	require.Equal(t, "127.0.0.1:2319", ok.Listen)
	require.Equal(t, "pebble", ok.Storage)
	require.Equal(t, "./styx-data", ok.DataDir)
}

func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", DataDir: dir, Log: log})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close(context.Background())) }()
	_, err = daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", DataDir: dir, Log: log})
	require.Error(t, err)
	require.Contains(t, err.Error(), "is in use by another")
}
