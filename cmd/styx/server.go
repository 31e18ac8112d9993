package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/styxq/styx/daemon"
)

func (a *app) serverCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:         "server",
		Annotations: offlineCmd,
		Short:       "Run a Styx server",
		Long: `Run a Styx server until SIGTERM or SIGINT, then shut down gracefully:
stop accepting connections, finish the requests in flight, flush storage,
and exit 0. A second signal during the shutdown ends the process at once.

Each setting comes from, in order of precedence: its flag, its environment
variable, the YAML file named by --config (or STYX_CONFIG), its default.
The file's keys are the flag names with '_' for '-'; an unknown key is an
error. For example:

  listen: 0.0.0.0:2319
  data_dir: /var/lib/styx
  storage: pebble
  sync: true
  log_level: info
  log_format: json
  shutdown_timeout: 30s
  max_request_bytes: 67108864
  body_read_timeout: 30s
  max_connections: 4096
  min_free_bytes: 0
  auth: true
  admin_key_file: /etc/styx/admin.key
  tls_cert: /etc/styx/tls/server.pem
  tls_key: /etc/styx/tls/server.key

A non-loopback --listen (such as 0.0.0.0) needs --auth, or --insecure to
accept that anyone who reaches the port can do anything. With --auth but no
TLS on such an address the server starts with a loud warning: keys cross the
network in clear text. See docs/security.md.

Logs go to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := loadServerSettings(cmd.Flags(), a.lookupEnv)
			if err != nil {
				return err
			}
			return a.serve(cmd.Context(), s)
		},
	}
	addServerFlags(cmd.Flags())
	return cmd
}

// serve runs a server with s until SIGTERM, SIGINT or the end of ctx, then
// closes it gracefully.
func (a *app) serve(ctx context.Context, s serverSettings) error {
	log := s.newLogger(a.stderr)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := daemon.New(ctx, s.daemonConfig(log))
	if err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	<-ctx.Done()
	stop() // from here a second signal ends the process the default way
	log.Info("shutting down", "cause", context.Cause(ctx).Error(), "timeout", s.ShutdownTimeout.String())
	if err := d.Close(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	log.Info("stopped")
	return nil
}
