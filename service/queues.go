package service

import (
	"context"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
	pb "github.com/styxq/styx/styxpb"
)

// QueuesCreate creates a queue. Omitted fields take the defaults:
// lease_timeout 1m, expire_timeout 336h, max_attempts 0 (unlimited),
// requested_partitions 1, no dead_queue, namespace queue.DefaultNamespace
// ("_system"). Queue names are unique across namespaces.
func (s *Service) QueuesCreate(ctx context.Context, req *pb.QueueInfo) error {
	if err := checkName("queue_name", req.QueueName); err != nil {
		return err
	}
	ns := req.Namespace
	if ns == "" {
		ns = queue.DefaultNamespace
	}
	if err := checkNamespace("namespace", ns); err != nil {
		return err
	}
	now := s.clock.Now().UTC()
	info := queue.QueueInfo{
		Name: req.QueueName, Namespace: ns, LeaseTimeout: DefaultLeaseTimeout, ExpireTimeout: DefaultExpireTimeout,
		Partitions: 1, CreatedAt: now, UpdatedAt: now,
	}
	info.Ordered = req.Ordered
	info.Cluster = req.Cluster // checked by the backend (queue.CheckCluster)
	if err := checkPausedField(req, info); err != nil {
		return err
	}
	if err := applyQueueInfo(&info, req); err != nil {
		return err
	}
	return auth.HideQueues(ctx, s.m.Create(ctx, info))
}

// QueuesUpdate changes a queue's configuration. Without update_mask (a
// Styx extension; Querator's clients never send it) it changes the fields
// that are set and keeps the others (Querator clears omitted fields; Styx
// does not). With update_mask it sets exactly the fields listed, zero
// values included ("dead_queue" with an empty dead_queue removes it,
// "max_attempts" with 0 makes attempts unlimited, "reference" with an
// empty one clears it), and refuses a field that is set but not listed.
// A request that names no field to change is refused (400), so an update
// never answers success for a change it did not make. Partitions can be
// added, not removed. A queue's namespace cannot change: namespace may be
// omitted or repeat the queue's own; another one is refused with 400
// (Querator validates it and keeps the old one).
func (s *Service) QueuesUpdate(ctx context.Context, req *pb.QueueInfo) error {
	if err := checkName("queue_name", req.QueueName); err != nil {
		return err
	}
	if req.Namespace != "" {
		if err := checkNamespace("namespace", req.Namespace); err != nil {
			return err
		}
	}
	if req.Paused {
		// Named before "nothing to update" (paused is no updatable field);
		// checked again in the update's own step.
		info, err := s.m.Info(ctx, req.QueueName)
		if err != nil {
			return auth.HideQueues(ctx, err)
		}
		if err := checkPausedField(req, info); err != nil {
			return err
		}
	}
	if req.Cluster != "" {
		return invalid("cluster", "a queue's cluster is set when it is created; queues.update does not change it")
	}
	fields, err := updateFields(req)
	if err != nil {
		return err
	}
	now := s.clock.Now().UTC()
	return auth.HideQueues(ctx, s.m.Update(ctx, req.QueueName, func(info *queue.QueueInfo) error {
		if req.Namespace != "" && req.Namespace != info.Namespace {
			return invalid("namespace", "queue '%s' is in namespace '%s' and cannot move to '%s'; "+
				"a namespace is set when a queue is created", info.Name, info.Namespace, req.Namespace)
		}
		if req.Ordered && !info.Ordered {
			return invalid("ordered", "queue '%s' is not ordered; ordered is set when a queue is created", info.Name)
		}
		if err := checkPausedField(req, *info); err != nil {
			return err
		}
		info.UpdatedAt = now
		return setQueueFields(info, req, fields)
	}))
}

// updatableFields are the fields queues.update can set, by their JSON
// name, with the proto field name update_mask also accepts.
var updatableFields = []struct{ json, proto string }{
	{"lease_timeout", "leaseTimeout"}, {"expire_timeout", "expireTimeout"}, {"max_attempts", "maxAttempts"},
	{"requested_partitions", "requestedPartitions"}, {"dead_queue", "deadQueue"}, {"reference", "reference"},
	{"deduplication_window", "deduplicationWindow"}, {"group_dead_policy", "group_dead_policy"},
}

// updatableNames lists updatableFields for messages.
func updatableNames() string {
	names := make([]string, len(updatableFields))
	for i, f := range updatableFields {
		names[i] = f.json
	}
	return strings.Join(names, ", ")
}

// setFields returns the JSON names of the updatable fields that are set
// (not zero) in req.
func setFields(req *pb.QueueInfo) map[string]bool {
	set := map[string]bool{}
	for name, v := range map[string]bool{
		"lease_timeout": req.LeaseTimeout != "", "expire_timeout": req.ExpireTimeout != "", "max_attempts": req.MaxAttempts != 0,
		"requested_partitions": req.RequestedPartitions != 0, "dead_queue": req.DeadQueue != "", "reference": req.Reference != "",
		"deduplication_window": req.DeduplicationWindow != "", "group_dead_policy": req.GroupDeadPolicy != "",
	} {
		if v {
			set[name] = true
		}
	}
	return set
}

// updateFields returns the fields an update sets, by JSON name: those of
// update_mask, or without one the fields that are set. It refuses an
// unknown name in the mask, a field set but not in the mask, and an update
// that sets nothing.
func updateFields(req *pb.QueueInfo) (map[string]bool, error) {
	set := setFields(req)
	if len(req.UpdateMask) == 0 {
		if len(set) == 0 {
			return nil, invalid("update_mask", "nothing to update; set at least one of %s, "+
				"or list the fields to set (zero values included) in update_mask", updatableNames())
		}
		return set, nil
	}
	fields := map[string]bool{}
	for i, name := range req.UpdateMask {
		known := false
		for _, f := range updatableFields {
			if name == f.json || name == f.proto {
				fields[f.json], known = true, true
			}
		}
		if !known {
			return nil, invalid("update_mask", "update_mask[%d] '%s' is not one of %s", i, quote(name), updatableNames())
		}
	}
	for _, f := range updatableFields {
		if set[f.json] && !fields[f.json] {
			return nil, invalid("update_mask", "%s is set but not listed in update_mask; list it, or leave it out", f.json)
		}
	}
	return fields, nil
}

// applyQueueInfo copies the set fields of req onto info and validates the
// result (queues.create).
func applyQueueInfo(info *queue.QueueInfo, req *pb.QueueInfo) error {
	return setQueueFields(info, req, setFields(req))
}

// setQueueFields sets the fields of info named in fields (JSON names) to
// their values in req, zero included, and validates the result.
func setQueueFields(info *queue.QueueInfo, req *pb.QueueInfo, fields map[string]bool) error {
	var err error
	if fields["lease_timeout"] {
		if info.LeaseTimeout, err = parsePositiveDuration("lease_timeout", req.LeaseTimeout, MaxExpireTimeout); err != nil {
			return err
		}
	}
	if fields["expire_timeout"] {
		if info.ExpireTimeout, err = parsePositiveDuration("expire_timeout", req.ExpireTimeout, MaxExpireTimeout); err != nil {
			return err
		}
	}
	if info.LeaseTimeout > info.ExpireTimeout {
		return invalid("lease_timeout", "%s is longer than expire_timeout %s", info.LeaseTimeout, info.ExpireTimeout)
	}
	if fields["max_attempts"] {
		if err := queue.CheckMaxAttempts(int64(req.MaxAttempts)); err != nil {
			return err
		}
		info.MaxAttempts = req.MaxAttempts
	}
	if fields["requested_partitions"] {
		if req.RequestedPartitions < 1 || req.RequestedPartitions > MaxPartitions {
			return invalid("requested_partitions", "%d is out of range 1..%d", req.RequestedPartitions, MaxPartitions)
		}
		info.Partitions = req.RequestedPartitions
	}
	if fields["dead_queue"] {
		if req.DeadQueue != "" {
			if err := checkName("dead_queue", req.DeadQueue); err != nil {
				return err
			}
		}
		info.DeadQueue = req.DeadQueue
	}
	if fields["reference"] {
		if err := checkIdent("reference", req.Reference, MaxFieldLength); err != nil {
			return err
		}
		info.Reference = req.Reference
	}
	if fields["deduplication_window"] {
		info.DeduplicationWindow = 0 // "": the default
		if req.DeduplicationWindow != "" {
			d, err := time.ParseDuration(req.DeduplicationWindow)
			if err != nil {
				return invalid("deduplication_window", "'%s' is not a duration such as '5m' or '1h'", quote(req.DeduplicationWindow))
			}
			if d < queue.MinDeduplicationWindow || d > queue.MaxDeduplicationWindow {
				return invalid("deduplication_window", "%s is out of range %s..%s", d, queue.MinDeduplicationWindow, queue.MaxDeduplicationWindow)
			}
			info.DeduplicationWindow = d
		}
	}
	if fields["group_dead_policy"] {
		if err := queue.CheckGroupDeadPolicy("group_dead_policy", req.GroupDeadPolicy, info.Ordered); err != nil {
			return err
		}
		info.GroupDeadPolicy = req.GroupDeadPolicy
	}
	return nil
}

// QueuesInfo returns a queue's configuration.
func (s *Service) QueuesInfo(ctx context.Context, req *pb.QueuesInfoRequest) (*pb.QueueInfo, error) {
	if err := checkName("queue_name", req.QueueName); err != nil {
		return nil, err
	}
	info, err := s.m.Info(ctx, req.QueueName)
	if err != nil {
		return nil, err
	}
	return toQueueInfo(ctx, info), nil
}

// QueuesList lists the queues of one namespace by name (bytewise) from
// pivot (inclusive), up to limit of them (0 means 1000, at most 65536). An
// omitted namespace means queue.DefaultNamespace, as in Querator: there is
// no call that lists every namespace at once. A namespace that holds no
// queue lists nothing.
func (s *Service) QueuesList(ctx context.Context, req *pb.QueuesListRequest) (*pb.QueuesListResponse, error) {
	limit, err := listLimit(req.Limit)
	if err != nil {
		return nil, err
	}
	if strings.Contains(req.Pivot, "~") { // no queue name holds one; Querator's message
		return nil, apierr.Invalidf("pivot is invalid; '%s' cannot contain '~' character", req.Pivot)
	}
	ns := req.Namespace
	if ns == "" {
		ns = queue.DefaultNamespace
	}
	infos, err := auth.ListCovered(ctx, s.m, queue.ListQueuesParams{Namespace: ns, Pivot: req.Pivot, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := &pb.QueuesListResponse{Items: make([]*pb.QueueInfo, len(infos))}
	for i, info := range infos {
		out.Items[i] = toQueueInfo(ctx, info)
	}
	return out, nil
}

// QueuesDelete deletes a queue and its items. A queue that is another
// queue's dead_queue cannot be deleted (force does not override this); the
// refusal names those queues the request's key covers (auth.HideQueues).
func (s *Service) QueuesDelete(ctx context.Context, req *pb.QueuesDeleteRequest) error {
	if err := checkName("queue_name", req.QueueName); err != nil {
		return err
	}
	return auth.HideQueues(ctx, s.m.Delete(ctx, req.QueueName))
}

// toQueueInfo is the wire form of info as the request's key may see it: a
// dead_queue it does not cover reads auth.HiddenQueue.
func toQueueInfo(ctx context.Context, info queue.QueueInfo) *pb.QueueInfo {
	out := &pb.QueueInfo{
		QueueName: info.Name, Namespace: info.Namespace, CreatedAt: qts(info.CreatedAt), UpdatedAt: qts(info.UpdatedAt),
		DeadQueue: auth.ShownQueue(ctx, info.DeadQueue), Reference: info.Reference, LeaseTimeout: info.LeaseTimeout.String(),
		ExpireTimeout: info.ExpireTimeout.String(), MaxAttempts: info.MaxAttempts, RequestedPartitions: info.Partitions,
	}
	if info.DeduplicationWindow != 0 { // omitted at the default: Querator's clients see only their fields
		out.DeduplicationWindow = info.DeduplicationWindow.String()
	}
	out.Ordered, out.GroupDeadPolicy = info.Ordered, info.GroupDeadPolicy
	out.Paused, out.PausedAt = info.Paused(), ts(info.PausedAt)
	if m := info.Move; m != nil {
		out.Move = &pb.QueueMove{Cluster: m.To, ItemsCopied: m.Copied, ItemsTotal: m.Total, Epoch: m.Epoch}
	}
	out.Cluster = info.Cluster // set by the router of several clusters only
	for p := range info.Partitions {
		out.Partitions = append(out.Partitions, &pb.PartitionInfo{Partition: p})
	}
	return out
}

// ts converts a time of a Styx extension field: nil (omitted) when zero.
func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// qts converts a time of one of Querator's fields, which Querator always
// sends: a zero time goes as Go's zero time (0001-01-01T00:00:00Z), so that
// a Querator client's AsTime().IsZero() holds (an omitted field decodes as
// the Unix epoch).
func qts(t time.Time) *timestamppb.Timestamp {
	return timestamppb.New(t)
}

// toStorageItems converts stored items to the wire, with the queue's
// max_attempts and their attributes as describe describes them (nil: none).
// A source_queue the request's key does not cover reads auth.HiddenQueue.
func toStorageItems(ctx context.Context, items []queue.Item, info queue.QueueInfo, describe queue.AttributeDescriber) []*pb.StorageItem {
	out := make([]*pb.StorageItem, len(items))
	for i, it := range items {
		m, b := it.Meta, it.Body
		si := &pb.StorageItem{
			Id: queue.FormatID(m.ID), SourceId: b.SourceID, IsLeased: m.Leased, LeaseDeadline: qts(m.LeaseDeadline),
			ExpireDeadline: qts(m.ExpireDeadline), DeadDeadline: qts(time.Time{}), CreatedAt: qts(m.CreatedAt), UpdatedAt: qts(m.CreatedAt),
			EnqueueAt: qts(m.EnqueueAt), Attempts: m.Attempts, MaxAttempts: info.MaxAttempts,
			Reference: b.Reference, Encoding: b.Encoding, Kind: b.Kind, Payload: b.Payload,
			SourceQueue: auth.ShownQueue(ctx, b.SourceQueue), DeadReason: b.DeadReason, DeadAt: ts(b.DeadAt),
			LastError: it.Errors.LastError, RedriveCount: b.RedriveCount, Group: m.Group,
			FirstId: queue.FormatID(m.FirstID()),
		}
		if m.Leased {
			si.LeaseClientId, si.LeaseKeyName = m.Holder.ClientID, m.Holder.KeyName
		}
		if b.DeadReason != "" {
			si.Fingerprint = queue.ItemFingerprint(&it)
		}
		for _, e := range it.Errors.Errors {
			si.Errors = append(si.Errors, toAttemptError(e))
		}
		si.DeadLetterAttempts = it.Errors.DeadLetterAttempts()
		for _, e := range it.Errors.DeadLetter {
			si.DeadLetterErrors = append(si.DeadLetterErrors, &pb.AttemptError{Attempt: e.Attempt, Error: e.Error, At: ts(e.At)})
		}
		if describe != nil && len(b.Attributes) > 0 {
			for _, a := range describe(b.Attributes) {
				si.Attributes = append(si.Attributes, &pb.ItemAttribute{Group: a.Group, Name: a.Name, DataType: a.DataType, Value: a.Value})
			}
		}
		out[i] = si
	}
	return out
}

// fromStorageItem converts an item to import.
func fromStorageItem(i int, in *pb.StorageItem) (queue.Item, error) {
	field := "items[" + strconv.Itoa(i) + "]"
	if len(in.Payload) > MaxPayloadBytes {
		return queue.Item{}, apierr.Invalidf("invalid %s.payload; %d bytes, the limit is %d (5 MB)", field, len(in.Payload), MaxPayloadBytes)
	}
	for _, f := range []struct{ name, v string }{{"kind", in.Kind}, {"encoding", in.Encoding}, {"reference", in.Reference}, {"source_id", in.SourceId}} {
		if err := checkIdent(field+"."+f.name, f.v, MaxFieldLength*4); err != nil {
			return queue.Item{}, err
		}
	}
	if err := checkFreeText(field+".last_error", in.LastError, MaxFieldLength*4); err != nil {
		return queue.Item{}, err
	}
	if in.Group != "" {
		if err := queue.CheckGroup(field+".group", in.Group); err != nil {
			return queue.Item{}, err
		}
	}
	if in.Attempts < 0 {
		return queue.Item{}, apierr.Invalidf("invalid %s.attempts; %d is negative", field, in.Attempts)
	}
	var times [5]time.Time
	for j, t := range [...]struct {
		name string
		ts   *timestamppb.Timestamp
	}{{"created_at", in.CreatedAt}, {"expire_deadline", in.ExpireDeadline}, {"enqueue_at", in.EnqueueAt}, {"dead_at", in.DeadAt}, {"lease_deadline", in.LeaseDeadline}} {
		var err error
		if times[j], err = timestamp(field+"."+t.name, t.ts); err != nil {
			return queue.Item{}, err
		}
	}
	it := queue.Item{
		Meta: queue.ItemMeta{Attempts: in.Attempts, CreatedAt: times[0], ExpireDeadline: times[1], EnqueueAt: times[2], Group: in.Group},
		Body: queue.ItemBody{
			Reference: in.Reference, Kind: in.Kind, Encoding: in.Encoding, Payload: in.Payload,
			SourceQueue: in.SourceQueue, SourceID: in.SourceId, DeadReason: in.DeadReason, DeadAt: times[3],
			RedriveCount: in.RedriveCount,
		},
		Errors: queue.ItemErrors{LastError: in.LastError},
	}
	if in.IsLeased {
		// lease_deadline counts only on a leased item: a lease that has no
		// deadline gets the queue's lease_timeout from now (queue.Queue.Import).
		it.Meta.Leased, it.Meta.LeaseDeadline = true, times[4]
	}
	if len(in.Errors) > MaxAttemptErrors {
		return queue.Item{}, apierr.Invalidf("invalid %s.errors; %d given, the limit is %d", field, len(in.Errors), MaxAttemptErrors)
	}
	for j, e := range in.Errors {
		at, err := timestamp(field+".errors["+strconv.Itoa(j)+"].at", e.At)
		if err != nil {
			return queue.Item{}, err
		}
		a := queue.AttemptError{Attempt: e.Attempt, Error: e.Error, At: at}
		switch {
		case e.Kind == entryEdit:
			a.Attempt = queue.EditAttempt
		case e.Kind != "":
			return queue.Item{}, invalid(field+".errors["+strconv.Itoa(j)+"].kind", "'%s' is not one of '' (an attempt) and 'edit'", quote(e.Kind))
		case e.Attempt < 0:
			return queue.Item{}, invalid(field+".errors["+strconv.Itoa(j)+"].attempt", "%d is negative", e.Attempt)
		}
		it.Errors.Errors = append(it.Errors.Errors, a)
	}
	return it, nil
}

// entryEdit is the kind of an attempt history entry that records a payload
// edit (AttemptError.kind; queue.EditAttempt).
const entryEdit = "edit"

// toAttemptError is the wire form of an attempt history entry: an edit
// (queue.EditAttempt) is attempt 0 of kind "edit".
func toAttemptError(e queue.AttemptError) *pb.AttemptError {
	out := &pb.AttemptError{Attempt: e.Attempt, Error: e.Error, At: ts(e.At)}
	if e.Attempt == queue.EditAttempt {
		out.Attempt, out.Kind = 0, entryEdit
	}
	return out
}
