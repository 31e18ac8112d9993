package main

import (
	"context"
	"fmt"
	"io"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// expiringLine is the warning of a dead-letter queue's dead items that
// its retention deletes within a day (queue.stats' expiring_within_day,
// issue 49), with a newline; "" when none will.
func expiringLine(queue string, n int64) string {
	if n <= 0 {
		return ""
	}
	verb := "expire"
	if n == 1 {
		verb = "expires"
	}
	return fmt.Sprintf("warning: %s of %s %s within a day (deleted at the end of the queue's expire timeout, counted from when each died); "+
		"redrive, fix or export them first\n", plural(int(n), "dead item"), queue, verb)
}

// warnExpiring writes expiringLine of queue to w, from its stats; a key
// that may not read them (or any failure) writes nothing: the warning is
// an aside of the command's output.
func warnExpiring(ctx context.Context, c *styx.Client, w io.Writer, queue string) {
	st, err := c.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: queue})
	if err != nil {
		return
	}
	_, _ = io.WriteString(w, expiringLine(queue, st.ExpiringWithinDay))
}
