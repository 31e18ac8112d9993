package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func completeJob(partition int32, id string) *job {
	return &job{it: &Item{Partition: partition, ID: id}}
}

func ids(js []*job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.it.ID
	}
	return out
}

// TestCompletesHandOff: the ack loop takes completes at once when no lease
// is due, and leaves them to the lease loop for at most completeWindow when
// one is; the lease loop takes one partition's; given-back completes go to
// the ack loop at once; after close the rest go, then nothing.
func TestCompletesHandOff(t *testing.T) {
	c := newCompletes()
	next := func() ([]*job, time.Duration) {
		start := time.Now()
		js := c.next()
		return js, time.Since(start)
	}

	// No lease due: at once, every pending complete.
	c.add(completeJob(0, "a"))
	c.add(completeJob(1, "b"))
	js, _ := next()
	assert.Equal(t, []string{"a", "b"}, ids(js))

	// A lease due: the lease loop takes the oldest one's partition.
	c.setLeasing(true)
	c.add(completeJob(1, "c"))
	c.add(completeJob(0, "d"))
	c.add(completeJob(1, "e"))
	assert.Equal(t, []string{"c", "e"}, ids(c.take()))
	// What it left the ack loop sends once the window has passed (the
	// lease loop is still "due": its slots stay busy).
	js, waited := next()
	assert.Equal(t, []string{"d"}, ids(js))
	assert.GreaterOrEqual(t, waited, completeWindow/2)
	assert.Less(t, waited, 100*completeWindow, "the window bounds the wait")

	// The lease loop stops being due (a plain lease, a backoff): at once.
	c.add(completeJob(0, "f"))
	done := make(chan []*job)
	go func() { js, _ := next(); done <- js }()
	c.setLeasing(false)
	select {
	case js := <-done:
		assert.Equal(t, []string{"f"}, ids(js))
	case <-time.After(10 * time.Second):
		t.Fatal("the ack loop did not take the completes when the lease loop stopped being due")
	}

	// Given back after a failed lease: at once, even while a lease is due,
	// and never to the lease loop.
	c.setLeasing(true)
	c.giveBack([]*job{completeJob(2, "g")})
	assert.Nil(t, c.take())
	js, _ = next()
	assert.Equal(t, []string{"g"}, ids(js))

	// Closed: what is left goes at once, then nil.
	c.add(completeJob(0, "h"))
	c.close()
	js, _ = next()
	require.Equal(t, []string{"h"}, ids(js))
	assert.Nil(t, c.next())
}
