package sqs_test

import (
	"testing"

	"github.com/styxq/styx/internal/servertest"
)

// TestMain runs the tests 4 at a time (servertest.Main): they wait more
// than they compute.
func TestMain(m *testing.M) { servertest.Main(m) }
