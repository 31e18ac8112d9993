package service_test

import (
	"testing"

	"github.com/styxq/styx/internal/servertest"
)

// TestMain runs the tests 4 at a time (servertest.Main): they wait more
// than they compute. Tests that measure the process's memory or set
// package-wide bounds (SetPageBytes) do not call t.Parallel, so they still
// run alone.
func TestMain(m *testing.M) { servertest.Main(m) }
