package sqs_test

// The SQS door's functional tests (issue 36): the real AWS SDK (and the Go
// client, to look at what an SQS call did through /v1) over HTTP against an
// in-process server (internal/servertest, on top of styxtest), on every
// storage backend.

import "context"

var ctx = context.Background()

// rlo is U+202E RIGHT-TO-LEFT OVERRIDE: "invoice\u202Efdp.exe" shows as
// "invoiceexe.pdf".
const rlo = "\u202e"
