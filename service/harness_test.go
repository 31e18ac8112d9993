package service_test

import "context"

// The whole-server harness of these tests (servers on every storage
// backend, restarts, faults, the HTTP client helpers) is
// internal/servertest, shared with the sqs and worker tests.

var ctx = context.Background()
