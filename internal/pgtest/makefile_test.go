package pgtest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMakePGStartDirectory (issue 49, 8): make pg-start and pg-stop keep
// their PostgreSQL in PG_DIR, /tmp/styx-pgtest unless given, so that two
// checkouts can each run one (it was one fixed directory).
func TestMakePGStartDirectory(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	dryRun := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("make", append([]string{"-n", "-C", "../.."}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	for _, c := range []struct {
		args []string
		dir  string
	}{
		{[]string{"pg-start"}, "/tmp/styx-pgtest"},
		{[]string{"pg-start", "PG_DIR=/tmp/styx-pgtest-b"}, "/tmp/styx-pgtest-b"},
		{[]string{"pg-stop", "PG_DIR=/tmp/styx-pgtest-b"}, "/tmp/styx-pgtest-b"},
	} {
		out := dryRun(c.args...)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.Contains(line, "styx-pgtest") && !strings.Contains(line, "'"+c.dir+"'") && !strings.Contains(line, "'"+c.dir+"/") {
				t.Errorf("make %v: a line that does not use %s: %s", c.args, c.dir, line)
			}
		}
		if !strings.Contains(out, "pgtest.sh") {
			t.Errorf("make %v runs no pgtest.sh:\n%s", c.args, out)
		}
	}
}
