package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
)

// TestRequestItems checks the size a backend bounds an iteration by: the
// items a request carries or names, and none for a lease or a clear.
func TestRequestItems(t *testing.T) {
	for name, c := range map[string]struct {
		r    *Request
		want int
	}{
		"produce":  {&Request{Op: &produceOp{items: make([]queue.ProduceItem, 3)}}, 3},
		"import":   {&Request{Op: &importOp{items: make([]queue.Item, 10_000)}}, 10_000},
		"redrive":  {&Request{Op: &redriveOp{items: make([]queue.RedriveItem, 2)}}, 2},
		"complete": {&Request{Op: &completeOp{ids: []uint64{1, 2}}}, 2},
		"retry":    {&Request{Op: &retryOp{items: make([]queue.RetryItem, 4)}}, 4},
		"renew":    {&Request{Op: &renewOp{ids: []uint64{7}}}, 1},
		"received": {&Request{Op: &receivedOp{rs: make([]queue.Receipt, 5)}}, 5},
		"delete":   {&Request{Op: &deleteOp{refs: make([]queue.ItemRef, 6)}}, 6},
		"clear":    {&Request{Op: &clearOp{}}, 0},
		"lease":    {&Request{Lease: &LeaseWait{BatchSize: 10}}, 0},
	} {
		require.Equal(t, c.want, c.r.Items(), name)
	}
}
