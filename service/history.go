package service

import (
	"context"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/history"
	"github.com/styxq/styx/internal/queue"
	pb "github.com/styxq/styx/styxpb"
)

// WithHistory makes queues.history answer from h (internal/history); the
// service's queues should be history.Counting's, so that produce and
// complete calls are counted. Without it queues.history is 501.
func (s *Service) WithHistory(h *history.Recorder) *Service {
	s.h = h
	return s
}

// QueuesHistory returns a queue's last hour, a point per minute (see
// internal/history): items produced, completed and dead-lettered, depth
// and, for a dead-letter queue, arrivals by error group. An empty
// queue_name sums every queue the request's key may read (depth included;
// groups left out). With a store behind the history the minutes survive
// restarts and, on PostgreSQL, count what every node served.
func (s *Service) QueuesHistory(ctx context.Context, req *pb.QueuesHistoryRequest) (*pb.QueuesHistoryResponse, error) {
	if s.h == nil {
		return nil, &apierr.Error{Code: 501, Message: "not implemented; this server keeps no queue history"}
	}
	infos, err := s.m.List(ctx, queue.ListQueuesParams{})
	if err != nil {
		return nil, err
	}
	out := &pb.QueuesHistoryResponse{QueueName: req.QueueName, IntervalSeconds: int32(history.Interval.Seconds()), GroupPatterns: map[string]string{}}
	if req.QueueName != "" {
		if _, _, err := s.queueInfo(ctx, req.QueueName); err != nil {
			return nil, err
		}
		points, patterns := s.h.History(ctx, req.QueueName)
		for _, p := range points {
			out.Points = append(out.Points, &pb.HistoryPoint{At: ts(p.At), Produced: p.Produced, Completed: p.Completed,
				DeadLettered: p.DeadLettered, Depth: p.Depth, DeadByGroup: p.DeadByGroup})
		}
		out.GroupPatterns = patterns
		return out, nil
	}
	var readable []queue.QueueInfo
	for _, info := range infos {
		if auth.Allowed(ctx, info.Name) {
			readable = append(readable, info)
		}
	}
	for _, p := range s.h.Sum(ctx, readable) {
		out.Points = append(out.Points, &pb.HistoryPoint{At: ts(p.At), Produced: p.Produced, Completed: p.Completed,
			DeadLettered: p.DeadLettered, Depth: p.Depth})
	}
	return out, nil
}
