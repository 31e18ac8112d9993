// Package service implements the API's semantics: it validates each wire
// request, turns it into a call on the queue manager, a logical queue, the
// redrive runner or the API keys (internal/auth), and turns the answer into
// the wire response. Every /v1 call has its handler here. Transport calls it; functional
// tests drive it through the Go client over HTTP.
//
// Every client mistake is answered with an apierr.Error (400 with a message
// naming the field and the limit; an unknown queue is 400 too, as in
// Querator) before anything changes in storage. With several mistakes in a
// request, the one named is the one Querator names: the queue name, then
// whether the queue exists, then the partition, then the other fields.
package service

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	duh "github.com/duh-rpc/duh-go"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx/internal/activity"
	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/history"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/redrive"
	pb "github.com/styxq/styx/styxpb"
)

// Service is the API. Its methods may be called concurrently.
type Service struct {
	m     queue.Queues
	r     *redrive.Runner
	clock clock.Clock
	h     *history.Recorder // nil: no queues.history (WithHistory)
	keys  *auth.Keys        // nil: keys.* answer 500 (WithKeys)
	// activity is the activity log activity.list reads (WithActivity);
	// nil: activity.list answers 501.
	activity *activity.Log
	// describe describes items' attributes blobs (WithAttributes); nil:
	// StorageItem.attributes stays empty.
	describe queue.AttributeDescriber
	// maxLeaseBytes bounds a queue.lease's items (WithMaxLeaseBytes).
	maxLeaseBytes int64
}

// DefaultMaxLeaseBytes is the default bound of a queue.lease's items'
// payload and attributes: 64 MiB, the default largest request
// (transport.DefaultMaxRequestBytes), so that a lease answers no more than
// a produce may bring.
const DefaultMaxLeaseBytes = 64 << 20

// New returns the API over a queue manager and a redrive runner.
func New(m queue.Queues, r *redrive.Runner, c clock.Clock) *Service {
	return &Service{m: m, r: r, clock: c, maxLeaseBytes: DefaultMaxLeaseBytes}
}

// WithMaxLeaseBytes bounds a queue.lease's items' payload and attributes
// to n bytes (queue.LeaseParams.MaxBytes): a lease takes the oldest ready
// items up to batch_size while they fit, and always one, whatever its
// size; the others stay ready for the next lease (no attempt counted).
// Items leased by the rules of their groups are bounded the same way, in
// their lease order (an ordered queue's group run is cut at the bound).
// n <= 0 keeps DefaultMaxLeaseBytes. The daemon passes its
// max_request_bytes. Returns s.
func (s *Service) WithMaxLeaseBytes(n int64) *Service {
	if n > 0 {
		s.maxLeaseBytes = n
	}
	return s
}

// WithAttributes sets how StorageItem.attributes is made from an item's
// attributes blob: by the describer of the API that writes such blobs (the
// SQS API's sqs.DescribeAttributes), so that the service shows them without
// knowing their format. d must be safe for concurrent use. Returns s.
func (s *Service) WithAttributes(d queue.AttributeDescriber) *Service {
	s.describe = d
	return s
}

// QueueProduce adds items to a queue; it returns when they are durable.
// request_timeout is required (10ms..15m, as in Querator) and bounds how
// long the produce waits for its queue, never below MinProduceWait
// (produceWithin): past it the answer is 453 (errProduceTimeout), the items
// stored or not. An item whose deduplication_id the queue accepted within queue.DeduplicationWindow is
// acknowledged and not stored again.
func (s *Service) QueueProduce(ctx context.Context, req *pb.QueueProduceRequest) error {
	l, err := s.queue(req.QueueName)
	if err != nil {
		return err
	}
	// Querator's order: request_timeout (required), then the items.
	wait, err := parseRequestTimeout(req.RequestTimeout)
	if err != nil {
		return err
	}
	if err := checkRequestTimeout(wait, "was "); err != nil {
		return err
	}
	if err := checkBatch("items", len(req.Items)); err != nil {
		return err
	}
	items := make([]queue.ProduceItem, len(req.Items))
	for i, in := range req.Items {
		payload := in.Bytes
		if len(payload) == 0 && in.Utf8 != "" {
			payload = []byte(in.Utf8)
		}
		items[i] = queue.ProduceItem{Encoding: in.Encoding, Kind: in.Kind, Reference: in.Reference, Payload: payload,
			DeduplicationID: in.DeduplicationId, Group: in.Group}
		// The item rules, one source for every door (queue.CheckProduceItem);
		// enqueue_at is converted after them, as before.
		if err := queue.CheckProduceItem(i, &items[i]); err != nil {
			return err
		}
		if in.EnqueueAt != nil {
			if items[i].EnqueueAt, err = timestamp("items["+strconv.Itoa(i)+"].enqueue_at", in.EnqueueAt); err != nil {
				return err
			}
		}
	}
	return produceWithin(ctx, wait, func(ctx context.Context) error { return l.Produce(ctx, items) })
}

// MinProduceWait is the least a produce waits for its queue, whatever its
// request_timeout: 1 second. A write needs some time however short the
// client's timeout (Querator likewise gives a produce's write at least its
// store's write timeout), and a produce answered 453 leaves its outcome
// unknown, so a 10ms request_timeout must not make a healthy write a 453.
const MinProduceWait = time.Second

// produceWithin runs produce and waits for its answer at most wait (a
// produce's request_timeout, Querator's bound on a produce: its logical
// queue answers a produce not written by then "request timeout"), or
// MinProduceWait when wait is shorter. Past that it answers
// errProduceTimeout and leaves produce to finish on its own goroutine: a
// produce the queue has taken is written whatever the caller does
// (engine.Loop.Call never abandons a write), so the answer cannot say it
// was not. The engine is not told (the bound is the service's, as the
// request_timeout is /v1's).
func produceWithin(ctx context.Context, wait time.Duration, produce func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- produce(ctx) }()
	t := time.NewTimer(max(wait, MinProduceWait))
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errProduceTimeout(wait)
	}
}

// errProduceTimeout answers a produce whose request_timeout (at least
// MinProduceWait) passed before its queue answered: 453
// (apierr.Unavailable: the outcome unknown, as docs/wire-contract.md has it
// for 453; reason produce_timeout, queue.ErrProduceTimeout), its message
// starting as a lease's request timeout does ("request timeout; …"). Not
// 454 as a lease's: the queue may have taken the produce, and a retry
// without deduplication ids may then store its items twice.
func errProduceTimeout(wait time.Duration) error {
	wait = max(wait, MinProduceWait)
	return apierr.Wrap(queue.ErrProduceTimeout, apierr.Unavailable, "request timeout; the produce was not done within %s (its request_timeout, at least %s): "+
		"its items may or may not be stored (a retry with the same deduplication_id values stores them once)", wait, MinProduceWait)
}

// QueueLease long-polls for items; 454 when none came within
// request_timeout, which is required (10ms..15m, as in Querator).
func (s *Service) QueueLease(ctx context.Context, req *pb.QueueLeaseRequest) (*pb.QueueLeaseResponse, error) {
	l, err := s.queue(req.QueueName)
	if err != nil {
		return nil, err
	}
	// Querator's order: a malformed request_timeout, client_id, batch_size,
	// then whether request_timeout is given and in range.
	wait, err := parseRequestTimeout(req.RequestTimeout)
	if err != nil {
		return nil, err
	}
	if req.ClientId == "" {
		return nil, invalid("client_id", "a client id is required")
	}
	if err := checkIdent("client_id", req.ClientId, MaxFieldLength); err != nil {
		return nil, err
	}
	if req.BatchSize < 1 || req.BatchSize > MaxBatch {
		return nil, invalid("batch_size", "%d is out of range 1..%d", req.BatchSize, MaxBatch)
	}
	if err := checkRequestTimeout(wait, ""); err != nil {
		return nil, err
	}
	var complete []uint64 // optional (a lease that completes first)
	if len(req.CompleteIds) > 0 {
		if complete, err = parseIDs("complete_ids", req.CompleteIds); err != nil {
			return nil, err
		}
	}
	res, err := l.Lease(ctx, queue.LeaseParams{BatchSize: int(req.BatchSize), ClientID: req.ClientId, Owner: auth.KeyName(ctx), Timeout: wait,
		MaxBytes: s.maxLeaseBytes, Complete: complete, CompletePartition: req.CompletePartition, WaitAfterComplete: req.WaitAfterComplete})
	if err != nil {
		return nil, err
	}
	out := &pb.QueueLeaseResponse{QueueName: req.QueueName, Partition: res.Partition, Items: make([]*pb.QueueLeaseItem, len(res.Items))}
	for i, it := range res.Items {
		out.Items[i] = &pb.QueueLeaseItem{
			Id: queue.FormatID(it.ID), Attempts: it.Attempts, LeaseDeadline: timestamppb.New(it.LeaseDeadline),
			Encoding: it.Encoding, Kind: it.Kind, Reference: it.Reference, Bytes: it.Payload, Group: it.Group,
		}
		if it.FirstID != 0 && it.FirstID != it.ID {
			// Only on an item requeued since it entered the queue: a
			// first lease's reply keeps to Querator's fields.
			out.Items[i].FirstId = queue.FormatID(it.FirstID)
		}
	}
	return out, nil
}

// QueueComplete deletes leased items. request_timeout is required
// (10ms..15m, as in Querator).
func (s *Service) QueueComplete(ctx context.Context, req *pb.QueueCompleteRequest) error {
	l, err := s.queue(req.QueueName)
	if err != nil {
		return err
	}
	// Querator's order: a malformed request_timeout, empty ids, a missing
	// or out-of-range request_timeout, then the ids themselves.
	wait, err := parseRequestTimeout(req.RequestTimeout)
	if err == nil && len(req.Ids) > 0 {
		err = checkRequestTimeout(wait, "")
	}
	if err != nil {
		return s.partitionFirst(ctx, req.QueueName, req.Partition, err)
	}
	ids, err := parseIDs("ids", req.Ids)
	if err != nil {
		return s.partitionFirst(ctx, req.QueueName, req.Partition, err)
	}
	return l.Complete(ctx, req.Partition, ids)
}

// QueueRetry ends leases without completion (requeue, schedule, release or
// dead-letter) and answers what became of each item, in request order.
func (s *Service) QueueRetry(ctx context.Context, req *pb.QueueRetryRequest) (*pb.QueueRetryResponse, error) {
	l, err := s.queue(req.QueueName)
	if err != nil {
		return nil, err
	}
	items, err := s.retryItems(req)
	if err != nil {
		return nil, s.partitionFirst(ctx, req.QueueName, req.Partition, err)
	}
	outcomes, err := l.Retry(ctx, req.Partition, items)
	if err != nil {
		return nil, err
	}
	out := &pb.QueueRetryResponse{Code: duh.CodeOK, CodeText: duh.CodeText(duh.CodeOK), Outcomes: make([]*pb.QueueRetryOutcome, len(outcomes))}
	for i, o := range outcomes {
		po := &pb.QueueRetryOutcome{Id: queue.FormatID(o.ID), Outcome: o.Outcome, Reason: o.Reason, DeadQueue: auth.ShownQueue(ctx, o.DeadQueue), Attempts: o.Attempts}
		if o.NewID != 0 {
			po.NewId = queue.FormatID(o.NewID)
		}
		if !o.RetryAt.IsZero() {
			po.RetryAt = timestamppb.New(o.RetryAt)
		}
		out.Outcomes[i] = po
	}
	return out, nil
}

// retryItems validates a retry's items.
func (s *Service) retryItems(req *pb.QueueRetryRequest) ([]queue.RetryItem, error) {
	if err := checkBatch("items", len(req.Items)); err != nil {
		return nil, err
	}
	now := s.clock.Now()
	items := make([]queue.RetryItem, len(req.Items))
	for i, in := range req.Items {
		id, err := queue.ParseID("items["+strconv.Itoa(i)+"].id", in.Id)
		if err != nil {
			return nil, err
		}
		if in.Dead && in.Release {
			return nil, apierr.Invalidf("invalid items[%d]; release and dead cannot be combined", i)
		}
		if err := checkFreeText("items["+strconv.Itoa(i)+"].error", in.Error, MaxErrorBytes); err != nil {
			return nil, err
		}
		items[i] = queue.RetryItem{ID: id, Dead: in.Dead, Release: in.Release, Error: in.Error}
		if in.RetryAt != nil {
			at, err := timestamp("items["+strconv.Itoa(i)+"].retry_at", in.RetryAt)
			if err != nil {
				return nil, err
			}
			if at.Before(now.Add(-MaxRetryAtPast)) {
				return nil, apierr.Invalidf("invalid items[%d].retry_at; %s is more than %s in the past",
					i, at.Format(time.RFC3339), MaxRetryAtPast)
			}
			items[i].RetryAt = at
		}
	}
	return items, nil
}

// QueueRenew extends live leases of one partition to now + lease_timeout
// (the queue's lease_timeout when omitted) and answers each item's new lease
// deadline, in request order.
func (s *Service) QueueRenew(ctx context.Context, req *pb.QueueRenewRequest) (*pb.QueueRenewResponse, error) {
	l, err := s.queue(req.QueueName)
	if err != nil {
		return nil, err
	}
	ids, err := parseIDs("ids", req.Ids)
	if err != nil {
		return nil, s.partitionFirst(ctx, req.QueueName, req.Partition, err)
	}
	var timeout time.Duration
	if req.LeaseTimeout != "" {
		if timeout, err = parsePositiveDuration("lease_timeout", req.LeaseTimeout, MaxExpireTimeout); err != nil {
			return nil, s.partitionFirst(ctx, req.QueueName, req.Partition, err)
		}
	}
	deadlines, err := l.Renew(ctx, req.Partition, ids, timeout)
	if err != nil {
		return nil, err
	}
	out := &pb.QueueRenewResponse{Items: make([]*pb.QueueRenewItem, len(ids))}
	for i, id := range ids {
		out.Items[i] = &pb.QueueRenewItem{Id: queue.FormatID(id), LeaseDeadline: timestamppb.New(deadlines[i])}
	}
	return out, nil
}

// QueueStats describes a queue's logical queue and partitions, and its
// consumers (queue.Queue.Consumers).
func (s *Service) QueueStats(ctx context.Context, req *pb.QueueStatsRequest) (*pb.QueueStatsResponse, error) {
	l, err := s.queue(req.QueueName)
	if err != nil {
		return nil, err
	}
	st, err := l.Stats(ctx)
	if err != nil {
		return nil, err
	}
	ls := &pb.QueueLogicalStats{LeaseWaiting: int32(st.LeaseWaiting)}
	for _, p := range st.Partitions {
		ls.InFlight += int32(p.Leased)
		ls.Partitions = append(ls.Partitions, &pb.QueuePartitionStats{
			Partition: p.Partition, Total: int32(p.Total), TotalLeased: int32(p.Leased), Failures: int32(p.Failures),
			Scheduled: int32(p.Scheduled), AverageAge: p.AverageAge.String(), AverageLeasedAge: p.AverageLeasedAge.String(),
		})
	}
	out := &pb.QueueStatsResponse{QueueName: req.QueueName, LogicalQueues: []*pb.QueueLogicalStats{ls}}
	for r, n := range st.DeadByReason {
		if out.DeadByReason == nil {
			out.DeadByReason = map[string]int64{}
		}
		out.DeadByReason[r] = int64(n)
	}
	// Sources the request's key does not cover are counted together, under
	// auth.HiddenQueue.
	for q, n := range auth.ShownCounts(ctx, st.DeadBySource) {
		if out.DeadBySource == nil {
			out.DeadBySource = map[string]int64{}
		}
		out.DeadBySource[q] = int64(n)
	}
	out.OldestCreatedAt = ts(st.Oldest)
	out.HeldGroupsTotal = int64(st.HeldTotal)
	out.ExpiringWithinDay = int64(st.ExpiringWithinDay)
	for _, g := range st.HeldGroups {
		out.HeldGroups = append(out.HeldGroups, &pb.QueueHeldGroup{Group: g.Group, Partition: g.Partition, DeadKey: g.DeadKey,
			HeldAt: ts(queue.FromNanos(g.HeldAt))})
	}
	cs, err := l.Consumers(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		out.Consumers = append(out.Consumers, &pb.QueueConsumer{ClientId: c.ClientID, KeyName: c.KeyName,
			FirstSeenAt: ts(c.FirstSeenAt), LastSeenAt: ts(c.LastSeenAt), Leased: c.Leased, Held: int32(c.Held), HeldIds: c.HeldIDs})
	}
	return out, nil
}

// QueueClear removes ready (queue), scheduled, or all (destructive) items.
// Its dry run is QueueClearDryRun.
func (s *Service) QueueClear(ctx context.Context, req *pb.QueueClearRequest) error {
	l, p, err := s.clearParams(req)
	if err != nil {
		return err
	}
	return l.Clear(ctx, p)
}

// QueueReload rebuilds a queue's in-memory state from storage.
func (s *Service) QueueReload(ctx context.Context, req *pb.QueueReloadRequest) error {
	l, err := s.queue(req.QueueName)
	if err != nil {
		return err
	}
	return l.Reload(ctx)
}

// queueInfo validates a queue name and returns its logical queue and its
// stored configuration.
func (s *Service) queueInfo(ctx context.Context, name string) (queue.Queue, queue.QueueInfo, error) {
	l, err := s.queue(name)
	if err != nil {
		return nil, queue.QueueInfo{}, err
	}
	info, err := s.m.Info(ctx, name)
	return l, info, err
}

// queue validates a queue name and returns its logical queue.
func (s *Service) queue(name string) (queue.Queue, error) {
	if err := checkName("queue_name", name); err != nil {
		return nil, err
	}
	return s.m.Get(name)
}

// partitionFirst returns the error for a partition the queue does not have,
// if partition is one, and else err, the request's first other mistake:
// Querator names the partition before any other field. The engines check the
// partition when they serve a request; this reads the queue's configuration
// only on the error path.
func (s *Service) partitionFirst(ctx context.Context, name string, partition int32, err error) error {
	if partition == 0 {
		return err // every queue has partition 0
	}
	info, ierr := s.m.Info(ctx, name)
	if ierr != nil {
		return err
	}
	if partition < 0 || partition >= info.Partitions {
		return invalid("partition", "queue '%s' has partitions 0..%d, not %d", name, info.Partitions-1, partition)
	}
	return err
}

// PageBytes bounds one page of storage/items.list, storage/scheduled.list
// and dead.list: 16 MiB of items, counted as queue.ItemBytes (payloads,
// attributes, text fields and attempt histories). A page stops before the
// item that would take it over, so it may hold fewer than limit items while
// more follow; it always holds its first item, and a page of the
// storage/*.list calls whose pivot item came first holds the item after it
// too, whatever their sizes. The backends read no more than the page and one
// item past it (queue.Queue.ListPage, queue.ScanParams.MaxBytes), so a call
// costs the server at most about PageBytes whatever its limit (issue 36:
// a read-only key's limit of 65,536 over 1 MiB items built gigabytes).
const PageBytes = 16 << 20

// pageBytes, when > 0, replaces PageBytes: tests lower it (export_test.go).
var pageBytes atomic.Int64

// maxPageBytes is the page bound in force.
func maxPageBytes() int {
	if n := pageBytes.Load(); n > 0 {
		return int(n)
	}
	return PageBytes
}

// StorageItemsList lists a partition's items in id order from pivot
// (inclusive: the pivot's own item comes first when it exists, as in
// Querator), with their dead-letter metadata. limit 0 means 1000. A page
// holds at most PageBytes of items, so it can be short while more follow:
// a client pages on from its last id until a page holds nothing new.
func (s *Service) StorageItemsList(ctx context.Context, req *pb.StorageItemsListRequest) (*pb.StorageItemsListResponse, error) {
	return s.listPage(ctx, req, false)
}

// StorageScheduledList lists a partition's scheduled items in id order from
// pivot (inclusive), like StorageItemsList.
func (s *Service) StorageScheduledList(ctx context.Context, req *pb.StorageItemsListRequest) (*pb.StorageItemsListResponse, error) {
	return s.listPage(ctx, req, true)
}

// listPage lists a page of storage/items.list or, when scheduled,
// storage/scheduled.list, bounded by PageBytes.
func (s *Service) listPage(ctx context.Context, req *pb.StorageItemsListRequest, scheduled bool) (*pb.StorageItemsListResponse, error) {
	if len(req.Ids) > 0 {
		return s.listByID(ctx, req)
	}
	l, info, after, limit, err := s.listArgs(ctx, req)
	if err != nil {
		return nil, err
	}
	p := queue.ListParams{Partition: req.Partition, After: after, Limit: limit, MaxBytes: maxPageBytes(), Scheduled: scheduled}
	items, err := l.ListPage(ctx, p)
	if err != nil {
		return nil, err
	}
	if req.Pivot != "" && limit > 1 && len(items) == 1 && items[0].Meta.ID == after+1 {
		// Only the pivot's own item fitted: a client paging from its last
		// id would get this page again. The next item comes too, whatever
		// its size (one read more at the end of the listing).
		p.After, p.Limit, p.MaxBytes = items[0].Meta.ID, 1, 0
		more, err := l.ListPage(ctx, p)
		if err != nil {
			return nil, err
		}
		items = append(items, more...)
	}
	return &pb.StorageItemsListResponse{Items: toStorageItems(ctx, items, info, s.describe)}, nil
}

// listByID lists the items req.Ids name, each by its current id or its
// first id (ADR 0031), in any partition and state, in the order of the ids,
// up to req.Limit (0: all), bounded by PageBytes.
func (s *Service) listByID(ctx context.Context, req *pb.StorageItemsListRequest) (*pb.StorageItemsListResponse, error) {
	l, info, err := s.queueInfo(ctx, req.QueueName)
	if err != nil {
		return nil, err
	}
	ids, err := parseIDs("ids", req.Ids)
	if err != nil {
		return nil, err
	}
	limit := len(ids)
	if req.Limit != 0 {
		if limit, err = listLimit(req.Limit); err != nil {
			return nil, err
		}
	}
	items, _, err := l.Scan(ctx, info.Partitions, &queue.DeadFilter{IDs: ids}, queue.ScanParams{Limit: limit, MaxBytes: maxPageBytes()})
	if err != nil {
		return nil, err
	}
	return &pb.StorageItemsListResponse{Items: toStorageItems(ctx, items, info, s.describe)}, nil
}

func (s *Service) listArgs(ctx context.Context, req *pb.StorageItemsListRequest) (queue.Queue, queue.QueueInfo, uint64, int, error) {
	l, info, err := s.queueInfo(ctx, req.QueueName)
	if err != nil {
		return nil, info, 0, 0, err
	}
	if req.Partition < 0 || req.Partition >= info.Partitions {
		return nil, info, 0, 0, invalid("partition", "queue '%s' has partitions 0..%d, not %d", req.QueueName, info.Partitions-1, req.Partition)
	}
	after, err := inclusivePivot(req.Pivot)
	if err != nil {
		return nil, info, 0, 0, err
	}
	limit, err := listLimit(req.Limit)
	return l, info, after, limit, err
}

// StorageItemsImport adds items to a partition as given and returns, for
// each in order, the item as stored. An item whose source_id the partition
// already holds on an imported item (or an earlier item of the request) is
// skipped, without error: its entry is the item that holds the source_id.
// Leased items stay leased (queue.Queue.Import).
func (s *Service) StorageItemsImport(ctx context.Context, req *pb.StorageItemsImportRequest) (*pb.StorageItemsImportResponse, error) {
	l, info, err := s.queueInfo(ctx, req.QueueName)
	if err != nil {
		return nil, err
	}
	if err := checkCount("items", len(req.Items), MaxImportItems); err != nil {
		return nil, s.partitionFirst(ctx, req.QueueName, req.Partition, err)
	}
	items := make([]queue.Item, len(req.Items))
	for i, in := range req.Items {
		if items[i], err = fromStorageItem(i, in); err != nil {
			return nil, s.partitionFirst(ctx, req.QueueName, req.Partition, err)
		}
	}
	out, err := l.Import(ctx, req.Partition, items)
	if err != nil {
		return nil, err
	}
	return &pb.StorageItemsImportResponse{Items: toStorageItems(ctx, out, info, s.describe)}, nil
}

// StorageItemsDelete removes items by id (current or first: ADR 0031), in
// any state; unknown ids are ignored.
func (s *Service) StorageItemsDelete(ctx context.Context, req *pb.StorageItemsDeleteRequest) error {
	l, err := s.queue(req.QueueName)
	if err != nil {
		return err
	}
	ids, err := parseIDs("ids", req.Ids)
	if err != nil {
		return s.partitionFirst(ctx, req.QueueName, req.Partition, err)
	}
	refs := make([]queue.ItemRef, len(ids))
	for i, id := range ids {
		refs[i] = queue.ItemRef{Partition: req.Partition, ID: id}
	}
	// An id may be an item's first id: the loop deletes by current id.
	if info, err := s.m.Info(ctx, req.QueueName); err == nil && len(ids) > 0 {
		found, _, err := l.Scan(ctx, info.Partitions, &queue.DeadFilter{IDs: ids}, queue.ScanParams{Limit: len(ids)})
		if err != nil {
			return err
		}
		for i := range refs {
			for _, it := range found {
				if it.Partition == refs[i].Partition && it.Meta.HasID(refs[i].ID) {
					refs[i].ID = it.Meta.ID
					break
				}
			}
		}
	}
	_, err = l.Delete(ctx, refs)
	return err
}
