package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/styxq/styx"
)

// Environment variables of the client flags.
const (
	// envEndpoint sets --endpoint.
	envEndpoint = "STYX_ENDPOINT"
	// envAPIKey sets --api-key.
	envAPIKey = "STYX_API_KEY"
	// envCAFile sets --ca-file.
	envCAFile = "STYX_CA_FILE"
	// envCertFile sets --cert-file.
	envCertFile = "STYX_CERT_FILE"
	// envKeyFile sets --key-file.
	envKeyFile = "STYX_KEY_FILE"
)

// app is one command line's state: where it writes, how it reads the
// environment and the clock, and the client flags. Each newRootCmd builds a
// fresh app; its fields are set while building and parsing, then only read
// by the one command that runs.
type app struct {
	stdout, stderr io.Writer
	// lookupEnv reads an environment variable (os.LookupEnv outside tests).
	lookupEnv func(string) (string, bool)
	// now tells time, for ages such as "3m12s ago".
	now func() time.Time
	// isTerminal reports whether a writer is a terminal (see terminal);
	// nil is the real check, isTerminal.
	isTerminal func(io.Writer) bool

	// endpoint is --endpoint; see client for STYX_ENDPOINT.
	endpoint string
	// apiKey is --api-key; see client for STYX_API_KEY.
	apiKey string
	// caFile is --ca-file; see client for STYX_CA_FILE.
	caFile string
	// certFile is --cert-file; see client for STYX_CERT_FILE.
	certFile string
	// keyFile is --key-file; see client for STYX_KEY_FILE.
	keyFile string
	// json is --json: print replies as protojson, one object per line.
	json bool
}

// newRootCmd returns the `styx` command tree, writing to stdout and stderr
// and reading the process environment. Each call returns independent
// commands, so tests can run many command lines in one process.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdout: stdout, stderr: stderr, lookupEnv: os.LookupEnv, now: time.Now}
	return a.rootCmd()
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "styx",
		Short: "Styx: a leased FIFO work queue with dead-letter queues",
		Long: `Styx is a leased FIFO work queue with first-class dead-letter queues,
wire-compatible with Querator's v1 HTTP API.

Run a server with 'styx server'; every other command is a client of one
(--endpoint, env STYX_ENDPOINT, default ` + styx.DefaultEndpoint + `; with
--api-key or env STYX_API_KEY for a server run with --auth, --ca-file
(env STYX_CA_FILE) for an https:// endpoint whose certificate a private CA
signed, and --cert-file with --key-file (env STYX_CERT_FILE, STYX_KEY_FILE)
for a server run with --tls-client-ca, which requires a client certificate).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
	}
	root.SetVersionTemplate("styx {{.Version}}\n")
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())
	})
	root.AddCommand(
		a.serverCmd(),
		a.queuesCmd(),
		a.addClientFlags(a.produceCmd()),
		a.addClientFlags(a.leaseCmd()),
		a.addClientFlags(a.completeCmd()),
		a.addClientFlags(a.retryCmd()),
		a.addClientFlags(a.renewCmd()),
		a.itemsCmd(),
		a.statsCmd(),
		a.deadCmd(),
		a.redrivesCmd(),
		a.activityCmd(),
		a.keysCmd(),
		a.backupCmd(),
		a.restoreCmd(),
		a.migrateCmd(),
	)
	return root
}

// terminal reports whether w is a terminal: progress bars and waiting
// notes go only to a person, never into a script's output.
func (a *app) terminal(w io.Writer) bool {
	if a.isTerminal != nil {
		return a.isTerminal(w)
	}
	return isTerminal(w)
}

// offlineCmd is the annotation of a command that works on local files and
// talks to no server (server, restore, migrate): it has no client flags
// (TestCLIClientFlagsOnEveryCommand requires them of every other command).
var offlineCmd = map[string]string{"styx/offline": "true"}

// addClientFlags adds the client flags (--endpoint, --api-key, --ca-file,
// --cert-file, --key-file) and --json to cmd and its subcommands.
func (a *app) addClientFlags(cmd *cobra.Command) *cobra.Command {
	f := cmd.PersistentFlags()
	f.StringVar(&a.endpoint, "endpoint", styx.DefaultEndpoint, "server base URL, http:// or https:// (env "+envEndpoint+")")
	f.StringVar(&a.apiKey, "api-key", "", "API key sent as 'Authorization: Bearer <key>' to a server run with --auth; "+
		"prefer the environment variable, which does not show in the process list (env "+envAPIKey+")")
	f.StringVar(&a.caFile, "ca-file", "", "PEM file of CA certificates to trust for an https:// endpoint (env "+envCAFile+")")
	f.StringVar(&a.certFile, "cert-file", "", "PEM file of a client certificate (leaf first, then intermediates) for a server run with "+
		"--tls-client-ca; needs --key-file (env "+envCertFile+")")
	f.StringVar(&a.keyFile, "key-file", "", "PEM file of the private key of --cert-file, unencrypted (env "+envKeyFile+")")
	f.BoolVar(&a.json, "json", false, "print replies as protojson for scripts: one object per line, one line per element of a list; "+
		"commands without a reply print nothing")
	return cmd
}

// client returns a client of the endpoint: --endpoint if given, else
// STYX_ENDPOINT if set, else the default; likewise --api-key or
// STYX_API_KEY, --ca-file or STYX_CA_FILE, --cert-file or STYX_CERT_FILE,
// and --key-file or STYX_KEY_FILE. A certificate without a key, or a key
// without a certificate, is an error naming both flags. The caller closes
// it.
func (a *app) client(cmd *cobra.Command) (*styx.Client, error) {
	flag := func(name, value, env string) string {
		if !cmd.Flags().Changed(name) {
			if v, ok := a.lookupEnv(env); ok && v != "" {
				return v
			}
		}
		return value
	}
	certFile := flag("cert-file", a.certFile, envCertFile)
	keyFile := flag("key-file", a.keyFile, envKeyFile)
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("--cert-file (env %s) and --key-file (env %s): set both or neither", envCertFile, envKeyFile)
	}
	return styx.NewClient(styx.ClientConfig{
		Endpoint: flag("endpoint", a.endpoint, envEndpoint),
		APIKey:   flag("api-key", a.apiKey, envAPIKey),
		CAFile:   flag("ca-file", a.caFile, envCAFile),
		CertFile: certFile,
		KeyFile:  keyFile,
	})
}

// withClient runs fn with a client for cmd's endpoint and closes the client
// afterwards.
func (a *app) withClient(cmd *cobra.Command, fn func(*styx.Client) error) error {
	c, err := a.client(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// exactArgs accepts exactly n positional arguments, described by names
// (such as "a queue NAME") in the error.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s takes %s, got %d argument(s); usage: %s", cmd.CommandPath(), names, len(args), cmd.UseLine())
		}
		return nil
	}
}

// minArgs accepts at least n positional arguments, described by names.
func minArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return fmt.Errorf("%s takes %s, got %d argument(s); usage: %s", cmd.CommandPath(), names, len(args), cmd.UseLine())
		}
		return nil
	}
}
