package sqs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// boto3Pythons returns the Python interpreters that can import boto3:
// Debian's (python3-boto3, which .ci/run installs: a release that speaks
// the query protocol) and the first python3 on PATH when it is another one
// (a newer boto3 speaks the JSON protocol).
func boto3Pythons(t *testing.T) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(path); err == nil && seen[real] {
			continue
		} else if err == nil {
			seen[real] = true
		}
		if exec.Command(path, "-c", "import boto3").Run() == nil {
			out = append(out, path)
		}
	}
	return out
}

// TestSQSPythonExample runs examples/sqs-python/orders.py, an application
// written for Amazon SQS with boto3 as-is, against the server: send,
// receive, dead-lettering and (with a boto3 that has it) a move task back;
// without auth, and with --auth signed (SigV4, by botocore) with a Styx key.
func TestSQSPythonExample(t *testing.T) {
	pythons := boto3Pythons(t)
	if len(pythons) == 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("no python3 with boto3 (.ci/run installs python3-boto3)")
		}
		t.Skip("no python3 with boto3 (apt install python3-boto3)")
	}
	script, err := filepath.Abs("../examples/sqs-python/orders.py")
	require.NoError(t, err)
	run := func(t *testing.T, s *servertest.Server, id, secret string) {
		for i, py := range pythons {
			cmd := exec.Command(py, script, fmt.Sprintf("p%d-", i))
			cmd.Env = append(os.Environ(), "STYX_ENDPOINT="+s.Endpoint, "AWS_ACCESS_KEY_ID="+id, "AWS_SECRET_ACCESS_KEY="+secret,
				"AWS_DEFAULT_REGION=us-east-1", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s:\n%s", py, out)
			require.Contains(t, string(out), "dead-lettered", "%s:\n%s", py, out)
			t.Logf("%s:\n%s", py, out)
		}
	}
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		run(t, servertest.Start(t, b), "test", "test")
	})
	// After the README's tour (its orders and orders-dead queues), run
	// twice without a prefix: each run picks a unique one.
	t.Run("after-tour", func(t *testing.T) {
		servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
			s := servertest.Start(t, b)
			require.NoError(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders-dead"}))
			require.NoError(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders", DeadQueue: "orders-dead", MaxAttempts: 3}))
			for range 2 {
				for _, py := range pythons {
					cmd := exec.Command(py, script)
					cmd.Env = append(os.Environ(), "STYX_ENDPOINT="+s.Endpoint, "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
						"AWS_DEFAULT_REGION=us-east-1", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
					out, err := cmd.CombinedOutput()
					require.NoError(t, err, "%s:\n%s", py, out)
					require.Contains(t, string(out), "dead-lettered", "%s:\n%s", py, out)
				}
			}
		})
	})
	t.Run("auth", func(t *testing.T) {
		servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
			s, _ := servertest.StartSQSAuth(t, b)
			key := s.NewKey("app", []string{"admin"})
			keyID, ok := auth.KeyID(key)
			require.True(t, ok)
			run(t, s, keyID, key)
		})
	})
}
