package service_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestQueuesMoveNeedsClusters: queues.move on memory, Pebble and one
// PostgreSQL cluster is refused with 400 naming cluster (there is nowhere
// to move to), and so is a move without a cluster.
func TestQueuesMoveNeedsClusters(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "q"})
		_, err := s.C.QueuesMove(t.Context(), &pb.QueuesMoveRequest{QueueName: "q", Cluster: "other"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid cluster; 'other': this server's storage has no PostgreSQL clusters")
		_, err = s.C.QueuesMove(t.Context(), &pb.QueuesMoveRequest{QueueName: "q"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid cluster; the cluster to move the queue to is required")
		assert.Equal(t, styx.ReasonInvalidArgument, styx.ErrorReason(err))
	})
}
