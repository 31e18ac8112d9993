package service

import (
	"context"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/redrive"
	pb "github.com/styxq/styx/styxpb"
)

// The calls on one redrive task: get and cancel (dead.go), and those that
// change a running task (issue 39): pause, resume and re-rate. Each needs
// the dead scope on a key that covers the task's dead-letter queue (403
// otherwise, naming the call), checked in one place (task).

// RedrivesPause asks a running task to stop after its current step: it
// answers the task pausing (then paused; a paused task is answered as it
// is). A paused task stays paused across restarts and failovers until
// redrives.resume. 409 for a task that has ended or is cancelling.
func (s *Service) RedrivesPause(ctx context.Context, req *pb.RedriveTaskRequest) (*pb.RedriveTask, error) {
	return s.changeTask(ctx, req.TaskId, "/v1/redrives.pause", func(id string) (redrive.Task, error) { return s.r.Pause(ctx, id) })
}

// RedrivesResume runs a paused task again from where it stopped (a
// running one is answered as it is). 409 for a task that has ended or is
// cancelling.
func (s *Service) RedrivesResume(ctx context.Context, req *pb.RedriveTaskRequest) (*pb.RedriveTask, error) {
	return s.changeTask(ctx, req.TaskId, "/v1/redrives.resume", func(id string) (redrive.Task, error) { return s.r.Resume(ctx, id) })
}

// RedrivesUpdate sets a running or paused task's rate_limit (items per
// second, 0 to 1,000,000; 0 for none), from its next step. 400 for a
// rate_limit out of range; 409 for a task that has ended or is cancelling.
func (s *Service) RedrivesUpdate(ctx context.Context, req *pb.RedrivesUpdateRequest) (*pb.RedriveTask, error) {
	if req.RateLimit < 0 || req.RateLimit > redrive.MaxRateLimit {
		return nil, invalid("rate_limit", "%d is out of range 0..%d items per second", req.RateLimit, redrive.MaxRateLimit)
	}
	return s.changeTask(ctx, req.TaskId, "/v1/redrives.update", func(id string) (redrive.Task, error) {
		return s.r.Update(ctx, id, req.RateLimit)
	})
}

// task returns task id once the request's key may call path on it: 400
// without an id, 404 for an unknown task, 403 when the key does not cover
// the task's dead-letter queue (a 403 names path, the call made). Every
// call on one task goes through it.
func (s *Service) task(ctx context.Context, id, path string) (redrive.Task, error) {
	if id == "" {
		return redrive.Task{}, invalid("task_id", "a task id is required")
	}
	t, err := s.r.Get(ctx, id)
	if err != nil {
		return redrive.Task{}, err
	}
	if err := auth.Authorize(ctx, auth.Access{Op: path, Queues: []string{t.Queue}}); err != nil {
		return redrive.Task{}, err
	}
	return t, nil
}

// changeTask checks the call as task does, then calls change.
func (s *Service) changeTask(ctx context.Context, id, path string, change func(id string) (redrive.Task, error)) (*pb.RedriveTask, error) {
	if _, err := s.task(ctx, id, path); err != nil {
		return nil, err
	}
	t, err := change(id)
	if err != nil {
		return nil, err
	}
	return toTask(ctx, t), nil
}
