// Command styx runs a Styx server (`styx server`) and talks to one: it
// creates and inspects queues, produces, leases, completes and retries
// items, lists items with their dead-letter metadata, and lists, counts,
// deletes and redrives dead items (styx dead, styx redrives).
//
// Every client command takes --endpoint (env STYX_ENDPOINT, default
// http://127.0.0.1:2319), --api-key (env STYX_API_KEY), --ca-file (env
// STYX_CA_FILE), --cert-file and --key-file (env STYX_CERT_FILE,
// STYX_KEY_FILE: a client certificate for mutual TLS) and --json (print
// replies as protojson, one object per line). Errors are printed as "styx: <message>" on stderr with exit
// status 1, or 75 when the server answered 454 (retry later: shutting down,
// overloaded) or 453 (storage unavailable). `styx --version` prints the
// version.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/styxq/styx"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses of run.
const (
	// exitError is any failure.
	exitError = 1
	// exitRetry is a failure the server asked to retry later (454: a
	// server shutting down, an overloaded queue) or a storage outage (453:
	// nothing was acknowledged): EX_TEMPFAIL of sysexits.h.
	exitRetry = 75
)

// run executes the command line args and returns the process exit status:
// 0 on success; exitRetry when the server answered 454 (retry later; a
// lease that found no item is a success) or 453 (storage unavailable);
// exitError on any other error.
// Errors are printed to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		_, _ = fmt.Fprintln(stderr, errorLine(err))
		if styx.IsRetry(err) || styx.IsUnavailable(err) {
			return exitRetry
		}
		return exitError
	}
	return 0
}

// codeTexts names the DUH-RPC codes a server answers with.
var codeTexts = map[int]string{
	styx.CodeBadRequest:   "bad request",
	styx.CodeUnauthorized: "unauthorized",
	styx.CodeForbidden:    "forbidden",
	styx.CodeNotFound:     "not found",
	styx.CodeConflict:     "conflict",
	styx.CodeUnavailable:  "unavailable",
	styx.CodeRetry:        "retry",
	styx.CodeBadContent:   "bad content",
	styx.CodeInternal:     "internal error",
	501:                   "no such method",
}

// errorLine formats err as the one line printed on failure:
// "styx: <message>", with the server's code for an *styx.Error.
func errorLine(err error) string {
	var serr *styx.Error
	if errors.As(err, &serr) {
		code := fmt.Sprint(serr.Code)
		if name, ok := codeTexts[serr.Code]; ok {
			code += " " + name
		}
		// Keep any context err wraps serr in, such as "after 2 items were
		// produced: ", and show serr as "<message> (code 404 not found)".
		// The message may quote what a client sent: its hidden characters
		// are escaped (oneLine).
		msg := strings.Replace(err.Error(), serr.Error(), fmt.Sprintf("%s (code %s)", oneLine(serr.Message), code), 1)
		return "styx: " + strings.TrimPrefix(msg, "styx: ")
	}
	// The client's own errors already start with "styx: ".
	msg := "styx: " + strings.TrimPrefix(err.Error(), "styx: ")
	if errors.Is(err, syscall.ECONNREFUSED) {
		msg += " (is a server running there? see --endpoint or " + envEndpoint + ")"
	}
	// The alert of a server that requires a client certificate and got
	// none (TLS 1.3: certificate required; TLS 1.2: bad certificate) or
	// one it does not trust (unknown certificate authority).
	if strings.Contains(msg, "remote error: tls: certificate required") || strings.Contains(msg, "remote error: tls: bad certificate") ||
		strings.Contains(msg, "remote error: tls: unknown certificate authority") {
		msg += " (the server requires a client certificate signed by its --tls-client-ca: see --cert-file and --key-file, or " +
			envCertFile + " and " + envKeyFile + ")"
	}
	return msg
}
