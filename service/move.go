package service

import (
	"context"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
	pb "github.com/styxq/styx/styxpb"
)

// QueuesMove moves a queue with everything in it to another PostgreSQL
// cluster (queues.move; issue 47, ADR 0023) and answers what moved once
// it serves there. The storage decides (queue.Mover): on memory, Pebble
// and a deployment of one PostgreSQL cluster there is nowhere to move to,
// 400 naming cluster. The admin scope, and the audit, are the transport's
// (as for queues.update).
func (s *Service) QueuesMove(ctx context.Context, req *pb.QueuesMoveRequest) (*pb.QueuesMoveResponse, error) {
	if err := checkName("queue_name", req.QueueName); err != nil {
		return nil, err
	}
	if req.Cluster == "" {
		return nil, invalid("cluster", "the cluster to move the queue to is required")
	}
	mv, ok := queue.AsMover(s.m)
	if !ok {
		return nil, invalid("cluster", "'%s': this server's storage has no PostgreSQL clusters to move a queue between "+
			"(queues.move needs storage postgres with postgres_clusters)", req.Cluster)
	}
	res, err := mv.Move(ctx, req.QueueName, req.Cluster)
	if err != nil {
		return nil, auth.HideQueues(ctx, err)
	}
	return &pb.QueuesMoveResponse{QueueName: req.QueueName, FromCluster: res.From, ToCluster: res.To, ItemsMoved: res.Items,
		Epoch: res.Epoch}, nil
}
