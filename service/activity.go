package service

import (
	"context"
	"strconv"

	"github.com/styxq/styx/internal/activity"
	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	pb "github.com/styxq/styx/styxpb"
)

// WithActivity makes activity.list answer from l (internal/activity), the
// log the transport pipeline writes. Without it activity.list is 501.
// Returns s.
func (s *Service) WithActivity(l *activity.Log) *Service {
	s.activity = l
	return s
}

// defaultActivityLimit is activity.list's limit when the request gives
// none: 100.
const defaultActivityLimit = 100

// ActivityList returns a page of the activity log, newest first (issue
// 49): the audited calls of a queue (queue_name, which the request's key
// must cover: the access rule checks it before this runs), or of every
// queue the key covers (empty queue_name; a key without queue patterns
// sees the records of no queue too). The queue need not exist any more: a
// deleted queue's records stay. limit is 1 to 1,000 (0: 100); pivot is a
// previous page's next_pivot.
func (s *Service) ActivityList(ctx context.Context, req *pb.ActivityListRequest) (*pb.ActivityListResponse, error) {
	if s.activity == nil {
		return nil, &apierr.Error{Code: 501, Message: "not implemented; this server keeps no activity log"}
	}
	limit, err := checkLimit(req.Limit, defaultActivityLimit, activity.MaxListLimit)
	if err != nil {
		return nil, err
	}
	var before uint64
	if req.Pivot != "" {
		if before, err = strconv.ParseUint(req.Pivot, 10, 64); err != nil || before == 0 {
			return nil, invalid("pivot", "'%s' is not a next_pivot of activity.list", quote(req.Pivot))
		}
	}
	records, next, err := s.activity.List(ctx, activity.ListParams{Queue: req.QueueName, Before: before, Limit: limit,
		Allowed: func(q string) bool { return auth.Allowed(ctx, q) }})
	if err != nil {
		return nil, err
	}
	out := &pb.ActivityListResponse{Records: make([]*pb.ActivityRecord, len(records))}
	if next != 0 {
		out.NextPivot = strconv.FormatUint(next, 10)
	}
	for i, r := range records {
		rec := &pb.ActivityRecord{Id: strconv.FormatUint(r.ID, 10), At: ts(r.At), KeyName: r.Key, Door: r.Door,
			Action: r.Action, Op: opName(r.Op), QueueName: r.Queue}
		for _, d := range r.Details {
			v := d.Value
			if d.Name == "destination" {
				v = auth.ShownQueue(ctx, v) // a queue the key does not cover is "~hidden"
			}
			rec.Details = append(rec.Details, &pb.ActivityDetail{Name: d.Name, Value: v})
		}
		out.Records[i] = rec
	}
	return out, nil
}

// opName is a /v1 path as activity records name it ("dead.delete").
func opName(op string) string {
	const prefix = "/v1/"
	if len(op) > len(prefix) && op[:len(prefix)] == prefix {
		return op[len(prefix):]
	}
	return op
}
