package service

import (
	"context"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
	pb "github.com/styxq/styx/styxpb"
)

// Acting on a live queue (issue 49): pausing and resuming its consumption,
// and the dry run of a clear. The rules are the domain's
// (queue.QueueInfo.Pause and Resume, queue.ClearDryRun) and the engine's
// (a paused queue's lease path hands out nothing); these handlers only
// validate and translate.

// QueuesPause pauses a queue's consumption (queues.pause) and returns its
// definition: from then on its leases wait and get nothing (a long poll
// until its request_timeout, then 454 as for an empty queue), on every
// door and every node (PostgreSQL: each node within its next refresh, at
// most RefreshInterval, 1s, and at once on the admin notification), while
// produces, the completes, retries and renewals of leases already held and
// the dead-letter moves go on. The state is stored with the queue and
// survives restarts. Pausing a paused queue keeps its paused_at.
func (s *Service) QueuesPause(ctx context.Context, req *pb.QueuesPauseRequest) (*pb.QueueInfo, error) {
	now := s.clock.Now().UTC()
	return s.setPaused(ctx, req.QueueName, func(info *queue.QueueInfo) bool { return info.Pause(now) })
}

// QueuesResume resumes a queue's consumption (queues.resume) and returns
// its definition: its waiting leases are served at once (on PostgreSQL's
// other nodes within a refresh). Resuming a running queue changes nothing.
func (s *Service) QueuesResume(ctx context.Context, req *pb.QueuesPauseRequest) (*pb.QueueInfo, error) {
	return s.setPaused(ctx, req.QueueName, func(info *queue.QueueInfo) bool { return info.Resume() })
}

// setPaused applies change to the queue's stored definition (its
// updated_at moves when it changed) and returns the definition stored.
func (s *Service) setPaused(ctx context.Context, name string, change func(*queue.QueueInfo) bool) (*pb.QueueInfo, error) {
	if err := checkName("queue_name", name); err != nil {
		return nil, err
	}
	now := s.clock.Now().UTC()
	var out queue.QueueInfo
	err := s.m.Update(ctx, name, func(info *queue.QueueInfo) error {
		if change(info) {
			info.UpdatedAt = now
		}
		out = *info
		return nil
	})
	if err != nil {
		return nil, auth.HideQueues(ctx, err)
	}
	return toQueueInfo(ctx, out), nil
}

// QueueClearDryRun answers what queue.clear with the same request would
// remove now, by state, removing nothing (queue.clear_dry_run): the same
// checks as QueueClear, then queue.ClearDryRun.
func (s *Service) QueueClearDryRun(ctx context.Context, req *pb.QueueClearRequest) (*pb.QueueClearDryRunResponse, error) {
	l, p, err := s.clearParams(req)
	if err != nil {
		return nil, err
	}
	c, err := queue.ClearDryRun(ctx, l, p)
	if err != nil {
		return nil, err
	}
	return &pb.QueueClearDryRunResponse{QueueName: req.QueueName, Ready: int64(c.Ready), Scheduled: int64(c.Scheduled),
		Leased: int64(c.Leased), Total: int64(c.Total)}, nil
}

// clearParams checks a queue.clear request (or its dry run) and returns its
// queue and what it selects.
func (s *Service) clearParams(req *pb.QueueClearRequest) (queue.Queue, queue.ClearParams, error) {
	l, err := s.queue(req.QueueName)
	if err != nil {
		return nil, queue.ClearParams{}, err
	}
	if !req.Queue && !req.Scheduled && !req.Destructive {
		return nil, queue.ClearParams{}, apierr.Invalidf("invalid request; set at least one of queue, scheduled or destructive")
	}
	return l, queue.ClearParams{Queue: req.Queue, Scheduled: req.Scheduled, Destructive: req.Destructive}, nil
}

// checkPausedField refuses a paused that create or update cannot set:
// paused: true on a queue that is not paused (queues.pause and
// queues.resume change it; a client that sends back the QueueInfo of a
// paused queue is not refused for it).
func checkPausedField(req *pb.QueueInfo, info queue.QueueInfo) error {
	if req.Paused && !info.Paused() {
		return invalid("paused", "queue '%s' is not paused, and queues.create and queues.update do not pause a queue; "+
			"pause it with queues.pause", info.Name)
	}
	return nil
}
