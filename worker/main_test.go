package worker_test

import (
	"testing"

	"github.com/styxq/styx/internal/servertest"
)

// TestMain runs the tests 4 at a time (servertest.Main), as the service
// and sqs packages do: the worker's tests wait on leases, backoffs and
// handlers far more than they compute (7 CPU seconds in 40 s of wall
// alone, 150 s in a loaded full suite), and with the default, GOMAXPROCS
// (2), each test's three backend subtests ran two at a time.
func TestMain(m *testing.M) { servertest.Main(m) }
