package servertest

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// Parallel is how many tests run at once in a package whose TestMain calls
// Main, unless -parallel says otherwise. Whole-server tests wait on the
// network, timers and PostgreSQL far more than they compute: under -race
// on two cores the service package kept half a core busy (134 CPU seconds
// in 257 s) with the default, GOMAXPROCS (2), which ran each test's three
// backend subtests two at a time and the long tests that call t.Parallel
// one after another.
const Parallel = 4

// Main runs a package's tests with -parallel Parallel, unless the command
// line set -parallel, and exits with their status: a TestMain is
//
//	func TestMain(m *testing.M) { servertest.Main(m) }
//
// Tests that must run alone (they measure the process's memory, or set a
// package-wide bound) do not call t.Parallel: Go runs the parallel tests
// after all of those, so -parallel does not reach them.
func Main(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(Parallel)); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
