package service_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// linInput is one call of the linearizability history: a produce of item,
// a lease of one item, or a complete of item.
type linInput struct {
	call, item string
}

// linOutput is a call's answer: the item a lease got ("" for none).
type linOutput struct {
	item string
}

// linState is the model's state: the ready items in lease order and the
// leased ones, sorted; immutable (each step makes a new one).
type linState struct {
	ready, leased []string
}

// queueModel is a leased FIFO queue of one partition: a lease gets the
// oldest ready item, or none only when no item is ready; a complete ends a
// leased item. With no lease expiring, no retry and no crash, every
// history of produce, lease and complete on one partition must be
// linearizable against it.
var queueModel = porcupine.Model{
	Init: func() any { return linState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(linState), input.(linInput), output.(linOutput)
		switch in.call {
		case "produce":
			return true, linState{ready: append(slices.Clip(s.ready), in.item), leased: s.leased}
		case "lease":
			if out.item == "" {
				return len(s.ready) == 0, s
			}
			if len(s.ready) == 0 || s.ready[0] != out.item {
				return false, s
			}
			leased := append(slices.Clone(s.leased), out.item)
			slices.Sort(leased)
			return true, linState{ready: s.ready[1:], leased: leased}
		case "complete":
			i, found := slices.BinarySearch(s.leased, in.item)
			if !found {
				return false, s
			}
			return true, linState{ready: s.ready, leased: slices.Delete(slices.Clone(s.leased), i, i+1)}
		}
		return false, s
	},
	Equal: func(a, b any) bool {
		x, y := a.(linState), b.(linState)
		return slices.Equal(x.ready, y.ready) && slices.Equal(x.leased, y.leased)
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		if in.call == "lease" {
			return fmt.Sprintf("lease -> %q", out.item)
		}
		return fmt.Sprintf("%s(%q)", in.call, in.item)
	},
}

// TestLinearizable: three clients produce, lease and complete on a queue of
// one partition at once, each call recorded with when it was sent and when
// its answer came; porcupine then looks for an order of the calls, each
// taking effect at one moment between the two, that the leased FIFO queue
// (queueModel) explains. An item leased out of order, leased twice, lost,
// or a lease answered empty while items were ready all along make the
// history illegal.
func TestLinearizable(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("concurrent history")
	}
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "lin", LeaseTimeout: "5m", MaxAttempts: 100})
		start := time.Now()
		var (
			mu      sync.Mutex
			history []porcupine.Operation
			wg      sync.WaitGroup
		)
		for c := range 3 {
			wg.Go(func() {
				rnd := rand.New(rand.NewPCG(uint64(c), 52))
				var held []*pb.QueueLeaseItem
				var partition int32
				for k := range 24 {
					in := linInput{}
					var out linOutput
					var err error
					call := time.Since(start).Nanoseconds()
					// Leases outnumber produces, so that few items wait
					// unleased: the order of items no lease has seen is
					// open, and the checker would weigh every one of them.
					switch r := rnd.IntN(5); {
					case r >= 3 && len(held) > 0:
						it := held[0]
						held = held[1:]
						in = linInput{call: "complete", item: string(it.Bytes)}
						err = s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "lin", Partition: partition, Ids: []string{it.Id}})
					case r >= 1 && len(held) < 2:
						in.call = "lease"
						var res *pb.QueueLeaseResponse
						res, err = s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "lin", BatchSize: 1,
							ClientId: fmt.Sprint("c", c), RequestTimeout: "20ms"})
						if styx.ErrorCode(err) == styx.CodeRetry {
							err = nil // nothing came within the request timeout
						} else if err == nil && len(res.Items) != 1 {
							err = fmt.Errorf("a lease of one item answered %d", len(res.Items))
						} else if err == nil {
							held = append(held, res.Items[0])
							partition = res.Partition
							out.item = string(res.Items[0].Bytes)
						}
					default:
						in = linInput{call: "produce", item: fmt.Sprintf("c%d-%d", c, k)}
						err = s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "lin", RequestTimeout: "10s",
							Items: []*pb.QueueProduceItem{{Bytes: []byte(in.item)}}})
					}
					ret := time.Since(start).Nanoseconds()
					if err != nil {
						t.Errorf("%s %q: %v", in.call, in.item, err)
						return
					}
					mu.Lock()
					history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// A minute bounds the search (it takes milliseconds here): a
		// history it cannot decide fails too, as Unknown.
		res := porcupine.CheckOperationsTimeout(queueModel, history, time.Minute)
		if res != porcupine.Ok {
			var b strings.Builder
			for _, op := range history {
				fmt.Fprintf(&b, "\n  client %d [%d, %d] %s", op.ClientId, op.Call, op.Return, queueModel.DescribeOperation(op.Input, op.Output))
			}
			t.Fatalf("the history of %d calls is %s against a leased FIFO queue:%s", len(history), res, b.String())
		}
	})
}
