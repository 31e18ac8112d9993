package service_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
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
// receive, dead-lettering and (with a boto3 that has it) a move task back.
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
	forEachBackend(t, func(t *testing.T, b backend) {
		s := start(t, b)
		for i, py := range pythons {
			cmd := exec.Command(py, script, string(rune('a'+i))+"-")
			cmd.Env = append(os.Environ(), "STYX_ENDPOINT="+s.d.Endpoint(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
				"AWS_DEFAULT_REGION=us-east-1", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s:\n%s", py, out)
			require.Contains(t, string(out), "dead-lettered", "%s:\n%s", py, out)
			t.Logf("%s:\n%s", py, out)
		}
	})
}
