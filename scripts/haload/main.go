// Command haload is the load and the checker of scripts/ha.sh (make ha): it
// runs produce (each item with a deduplication id; a failed produce is
// retried until acknowledged), lease, complete and retry on every Styx
// node given (one item
// in ten fails its first two attempts and is dead-lettered, max_attempts 2),
// starts redrive tasks from the dead-letter queue back to the queue every
// half second, runs the kill and promote commands, measures how long until
// every node writes again, waits for every redrive task to end, and then
// checks what the clients were answered against what the queue and its
// dead-letter queue hold. It prints one JSON line and exits 1 when an
// acknowledged item was lost or stored twice, an item was leased twice at
// once, or a redrive task did not complete.
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
	start        time.Time

	mu        sync.Mutex
	acked     map[string]bool // produce answered 200
	leases    map[string]lease
	completed map[string]bool     // complete answered 200
	tried     map[string]bool     // a complete was sent, whatever the answer
	failures  map[string]int      // retries answered 200 (or with an unknown outcome), per item
	tasks     []string            // redrive tasks started
	produced  []int               // per node, items acknowledged
	done      []int               // per node, items completed
	twice     []string            // leased while another consumer's lease was live
	events    map[string][]string // per item, what its clients sent and were answered, for the failure messages

	unavailable, other, retried atomic.Int64
}

// event records, for item p, what a client did and was answered, with the
// time since the start (mu held).
func (l *ledger) event(p, format string, args ...any) {
	l.events[p] = append(l.events[p], fmt.Sprintf("%.3fs ", time.Since(l.start).Seconds())+fmt.Sprintf(format, args...))
}

// answer names err's code and reason for an event ("200" when nil).
func answer(err error) string {
	if err == nil {
		return "200"
	}
	return fmt.Sprintf("%d %s: %v", styx.ErrorCode(err), styx.ErrorReason(err), err)
}

// poison reports whether payload p is one the consumers fail on its first
// two attempts (one item in ten), so that it dies and is redriven.
func poison(p string) bool { return strings.HasSuffix(p, "-0") && len(p)%2 == 0 }

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
	dlq := *queueName + "-dlq"
	if err := nodes[0].QueuesCreate(ctx, &pb.QueueInfo{QueueName: dlq, LeaseTimeout: leaseTimeout.String()}); err != nil {
		fatal(err)
	}
	if err := nodes[0].QueuesCreate(ctx, &pb.QueueInfo{QueueName: *queueName, LeaseTimeout: leaseTimeout.String(), RequestedPartitions: 2,
		DeadQueue: dlq, MaxAttempts: 2}); err != nil {
		fatal(err)
	}
	l := &ledger{leaseTimeout: leaseTimeout, acked: map[string]bool{}, leases: map[string]lease{}, completed: map[string]bool{},
		tried: map[string]bool{}, failures: map[string]int{}, events: map[string][]string{}, start: time.Now(), produced: make([]int, len(nodes)), done: make([]int, len(nodes))}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for n, node := range nodes {
		for c := range *clients {
			wg.Go(func() { produce(l, &stop, node, *queueName, n, c) })
			wg.Go(func() { consume(l, &stop, node, *queueName, n, c) })
		}
		wg.Go(func() { redrive(l, &stop, node, dlq) })
	}
	progress := func() ([]int, []int) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return append([]int(nil), l.produced...), append([]int(nil), l.done...)
	}
	time.Sleep(*warmup)

	out := map[string]any{}
	// Kill while a redrive task runs (its resumption is part of the check),
	// waiting up to 5 s for one.
	runningAtKill := running(ctx, nodes[0], l)
	for wait := time.Now(); len(runningAtKill) == 0 && time.Since(wait) < 5*time.Second; runningAtKill = running(ctx, nodes[0], l) {
		time.Sleep(20 * time.Millisecond)
	}
	killed := time.Now()
	out["kill_at_s"] = killed.Sub(l.start).Seconds() // the events' clock
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

	// Every redrive task ends; those running at the kill resumed on a node.
	statuses, resumed := map[string]int{}, 0
	for _, id := range l.tasks {
		t := waitTask(ctx, nodes[len(nodes)-1], id)
		statuses[t.Status]++
		if runningAtKill[id] && t.Status == "completed" {
			resumed++
		}
	}
	out["redrives"] = statuses
	out["redrives_running_at_kill"] = len(runningAtKill)
	out["redrives_resumed"] = resumed
	out["retried"] = l.retried.Load()

	// Where each item is: in the queue, in its dead-letter queue, or completed.
	where := map[string]int{}
	for _, item := range list(ctx, nodes[len(nodes)-1], *queueName, 2) {
		where[string(item.Payload)]++
	}
	dead := 0
	for _, item := range list(ctx, nodes[len(nodes)-1], dlq, 1) {
		where[string(item.Payload)]++
		dead++
	}
	out["dead_at_end"] = dead
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
			fmt.Fprintf(os.Stderr, "haload: acknowledged item %s lost; its history:\n  %s\n", p, strings.Join(l.events[p], "\n  "))
		}
	}
	for p, n := range where {
		if n > 1 {
			doubled++
			fmt.Fprintf(os.Stderr, "haload: item %s in %d places (acknowledged %v); its history:\n  %s\n", p, n, l.acked[p], strings.Join(l.events[p], "\n  "))
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
	_ = nodes[0].QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: dlq})
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	if lost > 0 || doubled > 0 || len(l.twice) > 0 || out["error"] != nil || l.other.Load() > 0 || statuses["completed"] != len(l.tasks) {
		os.Exit(1)
	}
}

// produce sends batches of 5 items, each with its payload as its
// deduplication id, and retries a batch that failed (453: the commit's
// outcome may be unknown) until it is acknowledged: each item must then be
// stored once (doubled counts the ones that were not).
func produce(l *ledger, stop *atomic.Bool, node *styx.Client, q string, n, c int) {
	for k := 0; !stop.Load(); k++ {
		var items []*pb.QueueProduceItem
		var payloads []string
		for j := range 5 {
			p := fmt.Sprintf("p-%d-%d-%d-%d", n, c, k, j)
			payloads = append(payloads, p)
			items = append(items, &pb.QueueProduceItem{Bytes: []byte(p), DeduplicationId: p})
		}
		var err error
		for tries := 0; ; tries++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = node.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: q, RequestTimeout: "5s", Items: items})
			cancel()
			if err == nil || stop.Load() {
				break
			}
			l.fail(err, styx.CodeRetry)
			time.Sleep(10 * time.Millisecond) // a client backing off
		}
		if err != nil {
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
		var ids, payloads, fail []string
		l.mu.Lock()
		for _, item := range res.Items {
			p := string(item.Bytes)
			deadline := item.LeaseDeadline.AsTime()
			if prev, ok := l.leases[p]; ok && !prev.released && deadline.Add(-l.leaseTimeout).Before(prev.deadline) {
				l.twice = append(l.twice, p)
				fmt.Fprintf(os.Stderr, "haload: item %s leased to %s (id %s, until %s) while %s held it (until %s); its history:\n  %s\n",
					p, consumer, item.Id, deadline.Format(time.RFC3339Nano), prev.consumer, prev.deadline.Format(time.RFC3339Nano), strings.Join(l.events[p], "\n  "))
			}
			l.leases[p] = lease{consumer: consumer, deadline: deadline}
			l.event(p, "leased to %s through node %d: id %s, attempts %d, until %s", consumer, n, item.Id, item.Attempts, deadline.Format(time.RFC3339Nano))
			if poison(p) && l.failures[p] < 2 {
				fail = append(fail, item.Id, p)
				continue
			}
			ids, payloads = append(ids, item.Id), append(payloads, p)
		}
		l.mu.Unlock()
		if len(fail) > 0 {
			retry(l, node, q, res.Partition, fail)
		}
		if len(ids) == 0 {
			continue
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		err = node.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: q, Partition: res.Partition, Ids: ids, RequestTimeout: "5s"})
		cancel()
		if err != nil {
			l.fail(err, styx.CodeBadRequest, styx.CodeRetry) // 400: a lease that ended during the failover
		}
		l.mu.Lock()
		for _, p := range payloads {
			l.tried[p] = true
			l.event(p, "complete by %s: %s", consumer, answer(err))
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

// retry fails the leased items idPayloads (id, payload pairs) with an
// error; an item's second failure dead-letters it. A retry whose outcome is
// unknown (453) counts as done: the item may have been released.
func retry(l *ledger, node *styx.Client, q string, partition int32, idPayloads []string) {
	var items []*pb.QueueRetryItem
	for i := 0; i < len(idPayloads); i += 2 {
		items = append(items, &pb.QueueRetryItem{Id: idPayloads[i], Error: "haload: poison item"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := node.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: q, Partition: partition, Items: items})
	cancel()
	l.mu.Lock()
	for i := 1; i < len(idPayloads); i += 2 {
		l.event(idPayloads[i], "retry (id %s): %s", idPayloads[i-1], answer(err))
	}
	l.mu.Unlock()
	if err != nil {
		l.fail(err, styx.CodeBadRequest, styx.CodeRetry)
		if styx.ErrorCode(err) != styx.CodeUnavailable {
			return
		}
	}
	l.retried.Add(int64(len(items)))
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 1; i < len(idPayloads); i += 2 {
		p := idPayloads[i]
		l.failures[p]++
		s := l.leases[p]
		s.released = true
		l.leases[p] = s
	}
}

// redrive starts a redrive (50 items/s, so that one is usually running when
// the primary dies) of every dead item of dlq back to its source
// queue every half second; a start refused because one is running (409) is
// not an error.
func redrive(l *ledger, stop *atomic.Bool, node *styx.Client, dlq string) {
	for !stop.Load() {
		time.Sleep(500 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t, err := node.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true, RateLimit: 50})
		cancel()
		if err != nil {
			l.fail(err, styx.CodeConflict, styx.CodeRetry)
			continue
		}
		l.mu.Lock()
		l.tasks = append(l.tasks, t.TaskId)
		l.mu.Unlock()
	}
}

// running returns the redrive tasks started so far that are running now.
func running(ctx context.Context, c *styx.Client, l *ledger) map[string]bool {
	l.mu.Lock()
	ids := append([]string(nil), l.tasks...)
	l.mu.Unlock()
	out := map[string]bool{}
	for _, id := range ids {
		t, err := c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: id})
		if err != nil {
			fatal(err)
		}
		if t.Status == "running" {
			out[id] = true
		}
	}
	return out
}

// waitTask polls a redrive task until it ends (60 s at most) and returns
// it as last seen.
func waitTask(ctx context.Context, c *styx.Client, id string) *pb.RedriveTask {
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		t, err := c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: id})
		if err != nil {
			fatal(err)
		}
		if t.Status != "running" && t.Status != "cancelling" || time.Since(start) > 60*time.Second {
			if t.Status != "completed" {
				fmt.Fprintf(os.Stderr, "haload: redrive task %s ended %s: %s\n", id, t.Status, t.FailureReason)
			}
			return t
		}
	}
}

// list pages through every partition's items.
func list(ctx context.Context, c *styx.Client, q string, partitions int32) []*pb.StorageItem {
	var all []*pb.StorageItem
	for p := int32(0); p < partitions; p++ {
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
