package service

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/fingerprint"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/redrive"
	pb "github.com/styxq/styx/styxpb"
)

// deadReasons are the valid DeadFilter.reason values.
var deadReasons = map[string]bool{queue.ReasonMaxAttempts: true, queue.ReasonExpired: true, queue.ReasonExplicit: true}

// parseFilter validates a wire DeadFilter (nil is the empty filter).
func parseFilter(in *pb.DeadFilter) (queue.DeadFilter, error) {
	var f queue.DeadFilter
	if in == nil {
		return f, nil
	}
	if len(in.Ids) > MaxBatch {
		return f, invalid("filter.ids", "%d given, the limit is %d", len(in.Ids), MaxBatch)
	}
	for _, s := range in.Ids {
		id, err := queue.ParseID("filter.ids", s)
		if err != nil {
			return f, err
		}
		f.IDs = append(f.IDs, id)
	}
	if in.SourceQueue != "" {
		if err := checkName("filter.source_queue", in.SourceQueue); err != nil {
			return f, err
		}
	}
	if in.Reason != "" && !deadReasons[in.Reason] {
		return f, invalid("filter.reason", "'%s' is not one of max_attempts, expired, explicit", quote(in.Reason))
	}
	if err := checkFreeText("filter.kind", in.Kind, MaxFieldLength); err != nil {
		return f, err
	}
	if err := checkFreeText("filter.error_contains", in.ErrorContains, MaxErrorBytes); err != nil {
		return f, err
	}
	if in.Fingerprint != "" && !fingerprint.Valid(in.Fingerprint) {
		return f, invalid("filter.fingerprint", "'%s' is not a fingerprint: 16 lowercase hex digits, as dead.groups reports", quote(in.Fingerprint))
	}
	if err := checkFreeText("filter.reference", in.Reference, MaxFieldLength); err != nil {
		return f, err
	}
	if err := checkFreeText("filter.payload_contains", in.PayloadContains, MaxFieldLength); err != nil {
		return f, err
	}
	f.SourceQueue, f.Reason, f.Kind, f.ErrorContains, f.Fingerprint = in.SourceQueue, in.Reason, in.Kind, in.ErrorContains, in.Fingerprint
	f.Reference, f.PayloadContains = in.Reference, in.PayloadContains
	for _, t := range []struct {
		name string
		ts   *timestamppb.Timestamp
		dst  *time.Time
	}{{"filter.dead_after", in.DeadAfter, &f.DeadAfter}, {"filter.dead_before", in.DeadBefore, &f.DeadBefore}} {
		var err error
		if *t.dst, err = timestamp(t.name, t.ts); err != nil {
			return f, err
		}
	}
	if !f.DeadAfter.IsZero() && !f.DeadBefore.IsZero() && !f.DeadAfter.Before(f.DeadBefore) {
		return f, invalid("filter.dead_after", "must be before filter.dead_before")
	}
	return f, nil
}

// checkAll enforces the all field of dead.delete and dead.redrive: an
// empty filter (every dead item of the queue) must be confirmed with all,
// and all cannot be combined with a filter. acts is false for a dry run,
// which changes nothing and needs no confirmation.
func checkAll(f queue.DeadFilter, all, acts bool) error {
	switch {
	case all && !f.IsZero():
		return invalid("all", "all selects every dead item and cannot be combined with a filter; give one or the other")
	case acts && !all && f.IsZero():
		return invalid("all", "an empty filter matches every dead item of the queue; set all: true to confirm, or give a filter")
	}
	return nil
}

// parseGuard parses the guard of a dead.delete or dead.redrive on the items
// a client counted (issue 48): up_to, an item id, into f.UpTo (the items
// with later ids, which died after the count, do not match), and
// expect_matched, the count the client confirmed, which it returns (-1
// when not given; the caller checks it with queue.CheckMatched). Call it
// after checkAll: up_to is no filter and may go with all.
func parseGuard(f *queue.DeadFilter, upTo string, expect *int64) (int64, error) {
	if upTo != "" {
		id, err := queue.ParseID("up_to", upTo)
		if err != nil {
			return 0, err
		}
		if id == 0 {
			return 0, invalid("up_to", "'%s' is no item's id; give the up_to of a dry run", upTo)
		}
		f.UpTo = id
	}
	if expect == nil {
		return -1, nil
	}
	if *expect < 0 {
		return 0, invalid("expect_matched", "%d is negative; give the matched count of a dry run", *expect)
	}
	return *expect, nil
}

// deadQueue returns the queue of a dead.* call and its configuration,
// after checking its name and that it is a dead-letter queue
// (queue.DeadLetterQueue: some queue names it as its dead_queue). Another
// queue holds live work, which dead.* calls never touch: 400.
func (s *Service) deadQueue(ctx context.Context, name string) (queue.Queue, queue.QueueInfo, error) {
	if err := checkName("queue_name", name); err != nil {
		return nil, queue.QueueInfo{}, err
	}
	return queue.DeadLetterQueue(ctx, s.m, name)
}

func toFilter(f queue.DeadFilter) *pb.DeadFilter {
	out := &pb.DeadFilter{SourceQueue: f.SourceQueue, Reason: f.Reason, Kind: f.Kind, ErrorContains: f.ErrorContains,
		DeadAfter: ts(f.DeadAfter), DeadBefore: ts(f.DeadBefore), Fingerprint: f.Fingerprint,
		Reference: f.Reference, PayloadContains: f.PayloadContains}
	for _, id := range f.IDs {
		out.Ids = append(out.Ids, queue.FormatID(id))
	}
	return out
}

// DeadList lists a queue's items that match the filter, oldest first, with
// their dead-letter metadata (and payloads unless without_payload). next_pivot continues the listing; it is empty
// at the end. A page may hold fewer than limit items while next_pivot is
// set: each call reads a bounded number of items, and a page holds at most
// PageBytes of items (payloads counted even with without_payload, as they
// are read), though always its first.
func (s *Service) DeadList(ctx context.Context, req *pb.DeadListRequest) (*pb.DeadListResponse, error) {
	l, info, err := s.deadQueue(ctx, req.QueueName)
	if err != nil {
		return nil, err
	}
	f, err := parseFilter(req.Filter)
	if err != nil {
		return nil, err
	}
	after, err := parsePivot(req.Pivot)
	if err != nil {
		return nil, err
	}
	limit, err := deadListLimit(req.Limit)
	if err != nil {
		return nil, err
	}
	items, next, err := l.Scan(ctx, info.Partitions, &f, queue.ScanParams{After: after, Limit: limit, MaxBytes: maxPageBytes()})
	if err != nil {
		return nil, err
	}
	out := &pb.DeadListResponse{Items: toStorageItems(ctx, items, info, s.describe)}
	if req.WithoutPayload {
		for _, it := range out.Items {
			it.Payload = nil
		}
	}
	if next != 0 {
		out.NextPivot = queue.FormatID(next)
	}
	return out, nil
}

// MaxGroups is the most groups one dead.groups call returns; 0 asks for
// DefaultGroups.
const (
	MaxGroups     = 1000
	DefaultGroups = 100
)

// DeadGroups returns the error groups of a dead-letter queue (its dead
// items by source queue, dead reason and error fingerprint), largest first,
// from counts the queue keeps: it reads no items but one sample per group.
// Only filter.source_queue, filter.reason and filter.fingerprint may be
// set; another filter field is refused (400), as it would need a scan. A
// queue that is no queue's dead_queue is refused (400), as for every dead.* call.
func (s *Service) DeadGroups(ctx context.Context, req *pb.DeadGroupsRequest) (*pb.DeadGroupsResponse, error) {
	l, _, err := s.deadQueue(ctx, req.QueueName)
	if err != nil {
		return nil, err
	}
	f, err := parseFilter(req.Filter)
	if err != nil {
		return nil, err
	}
	for _, x := range []struct {
		name string
		set  bool
	}{{"filter.ids", len(f.IDs) > 0}, {"filter.kind", f.Kind != ""}, {"filter.error_contains", f.ErrorContains != ""},
		{"filter.dead_after", !f.DeadAfter.IsZero()}, {"filter.dead_before", !f.DeadBefore.IsZero()},
		{"filter.reference", f.Reference != ""}, {"filter.payload_contains", f.PayloadContains != ""}} {
		if x.set {
			return nil, invalid(x.name, "dead.groups filters only by source_queue, reason and fingerprint (it reads counts, not items)")
		}
	}
	limit := int(req.Limit)
	switch {
	case limit == 0:
		limit = DefaultGroups
	case limit < 0 || limit > MaxGroups:
		return nil, invalid("limit", "%d is out of range 0..%d", req.Limit, MaxGroups)
	}
	g, err := shownGroups(ctx, l, queue.ErrorGroupFilter{SourceQueue: f.SourceQueue, Reason: f.Reason, Fingerprint: f.Fingerprint}, limit)
	if err != nil {
		return nil, err
	}
	out := &pb.DeadGroupsResponse{TotalGroups: int64(g.TotalGroups), TotalItems: g.TotalItems}
	for _, x := range g.Groups {
		out.Groups = append(out.Groups, &pb.DeadGroup{
			Fingerprint: x.Fingerprint, Pattern: x.Pattern, SampleError: x.SampleError, SourceQueue: x.SourceQueue,
			Reason: x.Reason, Count: x.Count, FirstDeadAt: ts(x.FirstDeadAt), LastDeadAt: ts(x.LastDeadAt),
			SampleId: queue.FormatID(x.SampleID),
		})
	}
	return out, nil
}

// shownGroups returns the groups of l that match f, at most limit, as the
// request's key may see them (auth.ShownGroups): the groups of the source
// queues it does not cover are one group per reason and fingerprint, and
// TotalGroups counts them so. For a key limited to some queues it reads
// every group that matches f (their samples too) when there are more than
// limit: a group beyond the limit may merge with one within it.
func shownGroups(ctx context.Context, l queue.Queue, f queue.ErrorGroupFilter, limit int) (queue.ErrorGroups, error) {
	g, err := l.ErrorGroups(ctx, f, limit)
	if err != nil || !auth.Hides(ctx) {
		return g, err
	}
	// The groups may change between the reads: read until one holds them all.
	for tries := 0; g.TotalGroups > len(g.Groups) && tries < 3; tries++ {
		if g, err = l.ErrorGroups(ctx, f, g.TotalGroups+16); err != nil {
			return g, err
		}
	}
	g.Groups = auth.ShownGroups(ctx, g.Groups)
	g.TotalGroups = len(g.Groups)
	g.Groups = g.Groups[:min(len(g.Groups), limit)]
	return g, nil
}

// DeadDelete deletes the items of a dead-letter queue that match the
// filter and returns how many it deleted. An empty filter (every item)
// needs all; leased items (a consumer of the dead-letter queue holds them)
// are never deleted. A queue that is no queue's dead_queue is refused (400).
//
// up_to leaves out the items with later ids. With expect_matched it first
// counts the matching items and, when they are not as many, deletes none
// (409, queue.CheckMatched); then it deletes the items it counted (ids up
// to the last of them), not those that died since.
func (s *Service) DeadDelete(ctx context.Context, req *pb.DeadDeleteRequest) (*pb.DeadDeleteResponse, error) {
	l, info, err := s.deadQueue(ctx, req.QueueName)
	if err != nil {
		return nil, err
	}
	f, err := parseFilter(req.Filter)
	if err != nil {
		return nil, err
	}
	if err := checkAll(f, req.All, true); err != nil {
		return nil, err
	}
	expect, err := parseGuard(&f, req.UpTo, req.ExpectMatched)
	if err != nil {
		return nil, err
	}
	if expect >= 0 {
		n, last, err := countDead(ctx, l, info.Partitions, &f)
		if err != nil {
			return nil, err
		}
		if err := queue.CheckMatched(n, expect, "deleted"); err != nil {
			return nil, err
		}
		if n == 0 {
			return &pb.DeadDeleteResponse{}, nil
		}
		f.UpTo = last
	}
	var deleted int64
	var after uint64
	for {
		// Bounded by PageBytes too: the items are read whole, though only
		// their ids are needed.
		items, next, err := l.Scan(ctx, info.Partitions, &f, queue.ScanParams{After: after, Limit: MaxBatch, MaxBytes: maxPageBytes()})
		if err != nil {
			return nil, err
		}
		refs := make([]queue.ItemRef, 0, len(items))
		for _, it := range items {
			if !it.Meta.Leased {
				refs = append(refs, queue.ItemRef{Partition: it.Partition, ID: it.Meta.ID})
			}
		}
		if len(refs) > 0 {
			n, err := l.DeleteDead(ctx, refs)
			if err != nil {
				return nil, err
			}
			deleted += int64(n)
		}
		if next == 0 {
			return &pb.DeadDeleteResponse{Deleted: deleted}, nil
		}
		after = next
	}
}

// countDead counts the items of l that match f and returns the id of the
// last of them (0 when none does), reading the queue a page at a time.
func countDead(ctx context.Context, l queue.Queue, partitions int32, f *queue.DeadFilter) (n int64, last uint64, err error) {
	var after uint64
	for {
		items, next, err := l.Scan(ctx, partitions, f, queue.ScanParams{After: after, Limit: MaxBatch, MaxBytes: maxPageBytes()})
		if err != nil {
			return 0, 0, err
		}
		n += int64(len(items))
		if len(items) > 0 {
			last = items[len(items)-1].Meta.ID
		}
		if next == 0 {
			return n, last, nil
		}
		after = next
	}
}

// DeadRedrive starts a redrive task (or, with dry_run, only counts the
// matching items). An empty filter needs all unless dry_run. The queue must
// be a dead-letter queue, and is checked first, as for every dead.* call
// (Querator names an unknown queue before any other mistake); the redrive
// runner checks the rest, as for every door (redrive.Runner.Start): a
// destination that is the queue or does not exist, rate_limit and
// max_redrive_count out of range (400). up_to leaves out the items with
// later ids; expect_matched refuses the start (409, queue.CheckMatched)
// when the matching items are not as many, and a dry run ignores it. A
// task over items another unfinished task holds starts and leaves them to
// it (RedriveTask.left_to), unless it names its items by id; a dry run
// counts them so (issue 49).
func (s *Service) DeadRedrive(ctx context.Context, req *pb.DeadRedriveRequest) (*pb.RedriveTask, error) {
	if _, _, err := s.deadQueue(ctx, req.QueueName); err != nil {
		return nil, err
	}
	f, err := parseFilter(req.Filter)
	if err != nil {
		return nil, err
	}
	if err := checkAll(f, req.All, !req.DryRun); err != nil {
		return nil, err
	}
	expect, err := parseGuard(&f, req.UpTo, req.ExpectMatched)
	if err != nil {
		return nil, err
	}
	var expectMatched *int64
	if expect >= 0 && !req.DryRun {
		expectMatched = &expect
	}
	if req.Destination != "" {
		if err := checkName("destination", req.Destination); err != nil {
			return nil, err
		}
	}
	var canaryTimeout time.Duration
	if req.CanaryTimeout != "" {
		if canaryTimeout, err = parsePositiveDuration("canary_timeout", req.CanaryTimeout, redrive.MaxCanaryTimeout); err != nil {
			return nil, err
		}
	}
	t, err := s.r.Start(ctx, redrive.StartParams{
		Queue: req.QueueName, Filter: f, Destination: req.Destination, RateLimit: req.RateLimit,
		DryRun: req.DryRun, MaxRedriveCount: req.MaxRedriveCount, KeyName: auth.KeyName(ctx),
		KeyQueues: auth.KeyQueues(ctx), ExpectMatched: expectMatched,
		Canary: req.Canary, CanaryTimeout: canaryTimeout,
	})
	if err != nil {
		return nil, err
	}
	return toTask(ctx, t), nil
}

// RedrivesList lists redrive tasks of a queue (all queues when empty),
// newest first.
func (s *Service) RedrivesList(ctx context.Context, req *pb.RedrivesListRequest) (*pb.RedrivesListResponse, error) {
	if req.QueueName != "" {
		if err := checkName("queue_name", req.QueueName); err != nil {
			return nil, err
		}
	}
	tasks, err := s.r.List(ctx, req.QueueName)
	if err != nil {
		return nil, err
	}
	out := &pb.RedrivesListResponse{}
	for _, t := range tasks {
		if auth.Allowed(ctx, t.Queue) { // a key with queue patterns sees their tasks only
			out.Tasks = append(out.Tasks, toTask(ctx, t))
		}
	}
	return out, nil
}

// RedrivesGet returns a task.
func (s *Service) RedrivesGet(ctx context.Context, req *pb.RedriveTaskRequest) (*pb.RedriveTask, error) {
	t, err := s.task(ctx, req.TaskId, "/v1/redrives.get")
	if err != nil {
		return nil, err
	}
	return toTask(ctx, t), nil
}

// RedrivesCancel asks a running task to stop.
func (s *Service) RedrivesCancel(ctx context.Context, req *pb.RedriveTaskRequest) (*pb.RedriveTask, error) {
	return s.changeTask(ctx, req.TaskId, "/v1/redrives.cancel", func(id string) (redrive.Task, error) { return s.r.Cancel(ctx, id) })
}

// toTask is the wire form of t as the request's key may see it: the queues
// it does not cover read auth.HiddenQueue (auth.ShownQueue), their counts
// in by_queue and by_destination summed under it: a key limited to some
// queues learns how many items went elsewhere, never where (issue 36).
func toTask(ctx context.Context, t redrive.Task) *pb.RedriveTask {
	name := func(q string) string { return auth.ShownQueue(ctx, q) }
	filter := toFilter(t.Filter)
	filter.SourceQueue = name(filter.SourceQueue)
	reason := auth.ShownText(ctx, t.FailureReason, append(slices.Collect(maps.Keys(t.ByQueue)), t.Destination, t.Filter.SourceQueue)...)
	out := &pb.RedriveTask{
		TaskId: t.ID, QueueName: t.Queue, Destination: name(t.Destination), Filter: filter, RateLimit: t.RateLimit,
		Status: t.Status, Matched: t.Matched, Moved: t.Moved, Failed: t.Failed, Skipped: t.Skipped,
		StartedAt: ts(t.StartedAt), FinishedAt: ts(t.FinishedAt), FailureReason: reason, DryRun: t.DryRun,
		MaxRedriveCount: t.MaxRedriveCount, KeyName: t.KeyName, ByQueue: map[string]*pb.RedriveCounts{},
		WouldMove: t.WouldMove, WouldSkip: t.WouldSkip, SkipReasons: t.SkipReasons, Warning: t.Warning, ErrorPattern: t.ErrorPattern,
	}
	if t.UpTo != 0 {
		out.UpTo = queue.FormatID(t.UpTo)
	}
	if len(t.LeftTo) > 0 {
		out.LeftTo = maps.Clone(t.LeftTo)
	}
	if !t.PausedAt.IsZero() {
		out.PausedAt = ts(t.PausedAt)
	}
	out.PausedMs = t.PausedFor.Milliseconds()
	toOutcomes(out, &t)
	for q, c := range t.ByQueue {
		sum := out.ByQueue[name(q)]
		if sum == nil {
			sum = &pb.RedriveCounts{}
			out.ByQueue[name(q)] = sum
		}
		sum.Moved += c.Moved
		sum.Failed += c.Failed
		sum.Skipped += c.Skipped
		sum.SkipReasons = addCounts(sum.SkipReasons, c.SkipReasons)
	}
	if t.DryRun {
		out.ByDestination = map[string]*pb.RedrivePlan{}
		for q, p := range t.ByDestination {
			sum := out.ByDestination[name(q)]
			if sum == nil {
				sum = &pb.RedrivePlan{}
				out.ByDestination[name(q)] = sum
			}
			sum.WouldMove += p.WouldMove
			sum.WouldSkip += p.WouldSkip
			sum.SkipReasons = addCounts(sum.SkipReasons, p.SkipReasons)
		}
	}
	return out
}

// addCounts adds b's counts to a's (a may be nil) and returns a.
func addCounts(a, b map[string]int64) map[string]int64 {
	if len(b) > 0 && a == nil {
		a = map[string]int64{}
	}
	for k, v := range b {
		a[k] += v
	}
	return a
}

// DeadEdit replaces the payload of a dead item (and, when given, its kind
// and reference), and adds an entry to its history saying who edited it,
// when, and the old payload's size and SHA-256 (the old payload itself is
// not kept). The item keeps its id, error group and dead-letter metadata.
//
// A redrive to the source queue delivers the edited bytes to the item's
// source_queue, so the request's key must cover that queue as well as the
// dead-letter queue (issue 36): a key limited to orders* may not rewrite
// the payload of a dead item that came from billing, though it may list,
// delete and redrive it (a redrive skips the items whose destination the
// key that started it does not cover; list and delete send nothing to
// another queue). The 403 does not name the source queue, which the key
// may not see.
//
// Errors: 400 for a queue that is no queue's dead_queue, a bad id or an
// over-long field; 403 for an item whose source queue the key does not
// cover; 404 for an item that is not there; 409 for a leased item.
func (s *Service) DeadEdit(ctx context.Context, req *pb.DeadEditRequest) (*pb.StorageItem, error) {
	l, info, err := s.deadQueue(ctx, req.QueueName)
	if err != nil {
		return nil, err
	}
	id, err := queue.ParseID("id", req.Id)
	if err != nil {
		return nil, err
	}
	if len(req.Payload) > MaxPayloadBytes {
		return nil, invalid("payload", "%d bytes, the limit is %d (5 MB)", len(req.Payload), MaxPayloadBytes)
	}
	if err := checkIdent("kind", req.GetKind(), MaxFieldLength); err != nil {
		return nil, err
	}
	if err := checkIdent("reference", req.GetReference(), MaxFieldLength); err != nil {
		return nil, err
	}
	found, _, err := l.Scan(ctx, info.Partitions, &queue.DeadFilter{IDs: []uint64{id}}, queue.ScanParams{Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, apierr.New(apierr.NotFound, "no such item; '%s' is not in queue '%s'", req.Id, req.QueueName)
	}
	if err := checkSourceQueue(ctx, &found[0], req.Id); err != nil {
		return nil, err
	}
	who := "an unauthenticated client (the server runs without --auth)"
	if k := auth.KeyName(ctx); k != "" {
		who = "key '" + k + "'"
	}
	now := s.clock.Now().UTC()
	// The item's current id: id may be its first id (ADR 0031).
	it, err := l.EditDead(ctx, queue.ItemRef{Partition: found[0].Partition, ID: found[0].Meta.ID}, func(it *queue.Item) error {
		old := it.Body.Payload
		var changes []string
		if req.Kind != nil && *req.Kind != it.Body.Kind {
			changes = append(changes, fmt.Sprintf("; kind was '%s'", it.Body.Kind))
			it.Body.Kind = *req.Kind
		}
		if req.Reference != nil && *req.Reference != it.Body.Reference {
			changes = append(changes, fmt.Sprintf("; reference was '%s'", it.Body.Reference))
			it.Body.Reference = *req.Reference
		}
		it.Body.Payload = slices.Clone(req.Payload)
		it.Errors = queue.AppendHistory(it.Errors, queue.AttemptError{
			Attempt: queue.EditAttempt, At: now,
			Error: fmt.Sprintf("payload edited by %s: was %d bytes (sha256 %x), now %d bytes (sha256 %x)%s",
				who, len(old), sha256.Sum256(old), len(req.Payload), sha256.Sum256(req.Payload), strings.Join(changes, "")),
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return toStorageItems(ctx, []queue.Item{it}, info, s.describe)[0], nil
}

// checkSourceQueue refuses (403) a dead.edit of an item whose source queue
// (where a redrive to the source delivers it) the request's key does not
// cover. The message names the item, not the queue: errors never name a
// queue the key cannot see. An item without a source queue, or a server
// without --auth, passes.
func checkSourceQueue(ctx context.Context, it *queue.Item, id string) error {
	if it.Body.SourceQueue == "" || auth.Allowed(ctx, it.Body.SourceQueue) {
		return nil
	}
	return apierr.New(apierr.Forbidden, "forbidden; key '%s' does not cover the source queue of dead item '%s', "+
		"where a redrive would deliver the edited payload; only a key that covers that queue may edit it", auth.KeyName(ctx), id)
}
