// Command haload is the load and the checker of scripts/ha.sh (make ha): it
// runs produce, lease and complete on every Styx node given, runs the kill
// and promote commands, measures how long until every node writes again,
// and then checks what the clients were answered against what the queue
// holds. It prints one JSON line and exits 1 when an acknowledged item was
// lost or an item was leased twice at once.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// lease is the latest lease of an item a consumer was given.
type lease struct {
	consumer string
	deadline time.Time
	released bool
}

// ledger is what the clients were answered. mu guards every field but the
// counters.
type ledger struct {
	leaseTimeout time.Duration

	mu        sync.Mutex
	acked     map[string]bool // produce answered 200
	leases    map[string]lease
	completed map[string]bool // complete answered 200
	tried     map[string]bool // a complete was sent, whatever the answer
	produced  []int           // per node, items acknowledged
	done      []int           // per node, items completed
	twice     []string        // leased while another consumer's lease was live

	unavailable, other atomic.Int64
}

func (l *ledger) fail(err error, also ...int) {
	code := styx.ErrorCode(err)
	if code == styx.CodeUnavailable {
		l.unavailable.Add(1)
		return
	}
	for _, c := range also {
		if code == c {
			return
		}
	}
	if l.other.Add(1) <= 5 {
		fmt.Fprintf(os.Stderr, "haload: unexpected answer: %v\n", err)
	}
}

func main() {
	endpoints := flag.String("endpoints", "", "comma-separated Styx node URLs")
	queueName := flag.String("queue", fmt.Sprintf("ha-%d", time.Now().UnixNano()), "queue to create and use")
	warmup := flag.Duration("warmup", 2*time.Second, "load before the kill")
	after := flag.Duration("after", 3*time.Second, "load after every node writes again")
	killCmd := flag.String("kill", "", "shell command that kills the primary")
	promoteCmd := flag.String("promote", "", "shell command that promotes the standby; returns once it is promoted")
	clients := flag.Int("clients", 2, "producers and consumers per node")
	flag.Parse()
	ctx := context.Background()
	var nodes []*styx.Client
	for _, e := range strings.Split(*endpoints, ",") {
		c, err := styx.NewClient(styx.ClientConfig{Endpoint: e})
		if err != nil {
			fatal(err)
		}
		nodes = append(nodes, c)
	}
	const leaseTimeout = 5 * time.Second
	if err := nodes[0].QueuesCreate(ctx, &pb.QueueInfo{QueueName: *queueName, LeaseTimeout: leaseTimeout.String(), RequestedPartitions: 2}); err != nil {
		fatal(err)
	}
	l := &ledger{leaseTimeout: leaseTimeout, acked: map[string]bool{}, leases: map[string]lease{}, completed: map[string]bool{},
		tried: map[string]bool{}, produced: make([]int, len(nodes)), done: make([]int, len(nodes))}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for n, node := range nodes {
		for c := range *clients {
			wg.Go(func() { produce(l, &stop, node, *queueName, n, c) })
			wg.Go(func() { consume(l, &stop, node, *queueName, n, c) })
		}
	}
	progress := func() ([]int, []int) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return append([]int(nil), l.produced...), append([]int(nil), l.done...)
	}
	time.Sleep(*warmup)

	out := map[string]any{}
	killed := time.Now()
	run(*killCmd)
	run(*promoteCmd)
	out["kill_to_promoted_s"] = time.Since(killed).Seconds()
	p0, d0 := progress()
	back := make([]float64, len(nodes))
	for left := len(nodes); left > 0; time.Sleep(5 * time.Millisecond) {
		p, d := progress()
		for i := range nodes {
			if back[i] == 0 && p[i] > p0[i] && d[i] > d0[i] {
				back[i] = time.Since(killed).Seconds()
				left--
			}
		}
		if time.Since(killed) > 60*time.Second {
			out["error"] = "a node did not write again within 60 s of the kill"
			break
		}
	}
	out["kill_to_writes_s"] = back
	promoted := make([]float64, len(back))
	for i, b := range back {
		promoted[i] = b - out["kill_to_promoted_s"].(float64)
	}
	out["promoted_to_writes_s"] = promoted
	time.Sleep(*after)
	stop.Store(true)
	wg.Wait()

	// Where each item is: in the queue, or completed.
	where := map[string]int{}
	for _, it := range list(ctx, nodes[len(nodes)-1], *queueName) {
		where[string(it.Payload)]++
	}
	l.mu.Lock()
	for p := range l.completed {
		where[p]++
	}
	var lost, doubled, ambiguous int
	for p := range l.acked {
		switch {
		case where[p] == 0 && l.tried[p]:
			ambiguous++ // completed by a call whose answer was lost
		case where[p] == 0:
			lost++
			fmt.Fprintf(os.Stderr, "haload: acknowledged item %s lost\n", p)
		}
	}
	for p, n := range where {
		if n > 1 {
			doubled++
			fmt.Fprintf(os.Stderr, "haload: item %s in %d places (acknowledged %v)\n", p, n, l.acked[p])
		}
	}
	out["acknowledged"] = len(l.acked)
	out["completed"] = len(l.completed)
	out["lost"] = lost
	out["doubled"] = doubled
	out["leased_twice"] = len(l.twice)
	out["completes_answer_lost"] = ambiguous
	out["answered_453"] = l.unavailable.Load()
	out["unexpected_answers"] = l.other.Load()
	l.mu.Unlock()
	_ = nodes[0].QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: *queueName})
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	if lost > 0 || len(l.twice) > 0 || out["error"] != nil || l.other.Load() > 0 {
		os.Exit(1)
	}
}

func produce(l *ledger, stop *atomic.Bool, node *styx.Client, q string, n, c int) {
	for k := 0; !stop.Load(); k++ {
		var items []*pb.QueueProduceItem
		var payloads []string
		for j := range 5 {
			p := fmt.Sprintf("p-%d-%d-%d-%d", n, c, k, j)
			payloads = append(payloads, p)
			items = append(items, &pb.QueueProduceItem{Bytes: []byte(p)})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := node.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: q, RequestTimeout: "5s", Items: items})
		cancel()
		if err != nil {
			l.fail(err, styx.CodeRetry)
			time.Sleep(10 * time.Millisecond) // a client backing off
			continue
		}
		l.mu.Lock()
		for _, p := range payloads {
			l.acked[p] = true
		}
		l.produced[n] += len(payloads)
		l.mu.Unlock()
	}
}

func consume(l *ledger, stop *atomic.Bool, node *styx.Client, q string, n, c int) {
	consumer := fmt.Sprintf("consumer-%d-%d", n, c)
	for !stop.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := node.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: q, BatchSize: 10, ClientId: consumer, RequestTimeout: "500ms"})
		cancel()
		if err != nil {
			if !styx.IsRetry(err) {
				l.fail(err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		var ids, payloads []string
		l.mu.Lock()
		for _, it := range res.Items {
			p := string(it.Bytes)
			deadline := it.LeaseDeadline.AsTime()
			if prev, ok := l.leases[p]; ok && !prev.released && deadline.Add(-l.leaseTimeout).Before(prev.deadline) {
				l.twice = append(l.twice, p)
				fmt.Fprintf(os.Stderr, "haload: item %s leased to %s while %s held it\n", p, consumer, prev.consumer)
			}
			l.leases[p] = lease{consumer: consumer, deadline: deadline}
			ids, payloads = append(ids, it.Id), append(payloads, p)
		}
		l.mu.Unlock()
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		err = node.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: q, Partition: res.Partition, Ids: ids, RequestTimeout: "5s"})
		cancel()
		if err != nil {
			l.fail(err, styx.CodeBadRequest, styx.CodeRetry) // 400: a lease that ended during the failover
		}
		l.mu.Lock()
		for _, p := range payloads {
			l.tried[p] = true
			if err == nil {
				s := l.leases[p]
				s.released = true
				l.leases[p] = s
				l.completed[p] = true
			}
		}
		if err == nil {
			l.done[n] += len(ids)
		}
		l.mu.Unlock()
	}
}

// list pages through every partition's items.
func list(ctx context.Context, c *styx.Client, q string) []*pb.StorageItem {
	var all []*pb.StorageItem
	for p := int32(0); p < 2; p++ {
		pivot := ""
		for {
			res, err := c.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: q, Partition: p, Pivot: pivot, Limit: 1000})
			if err != nil {
				fatal(err)
			}
			page := res.Items
			if pivot != "" && len(page) > 0 && page[0].Id == pivot {
				page = page[1:]
			}
			all = append(all, page...)
			if len(res.Items) < 1000 {
				break
			}
			pivot = res.Items[len(res.Items)-1].Id
		}
	}
	return all
}

func run(cmd string) {
	if cmd == "" {
		return
	}
	c := exec.Command("bash", "-c", cmd)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		fatal(fmt.Errorf("%s: %w", cmd, err))
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "haload:", err)
	os.Exit(2)
}
