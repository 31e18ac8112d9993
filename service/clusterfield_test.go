package service_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestClusterField: queues.create's cluster (ADR 0023) on a server of one
// storage: memory and Pebble have no clusters and refuse any (400 naming
// cluster); one PostgreSQL cluster is "main" and refuses another name;
// queues.info and queues.list omit the field (a Querator client sees only
// its fields), and queues.update refuses it. Servers over several
// clusters are tested in internal/backend/clusters.
func TestClusterField(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		servertest.RequireCode(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "q", Cluster: "east"}), 400, "cluster", "east")
		if b.Postgres() {
			s.CreateQueue(&pb.QueueInfo{QueueName: "q", Cluster: "main"})
		} else {
			servertest.RequireCode(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "q", Cluster: "main"}), 400, "cluster")
			s.CreateQueue(&pb.QueueInfo{QueueName: "q"})
		}
		info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "q"})
		require.NoError(t, err)
		require.Empty(t, info.Cluster)
		list, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{})
		require.NoError(t, err)
		require.Len(t, list.Items, 1)
		require.Empty(t, list.Items[0].Cluster)
		servertest.RequireCode(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "q", Cluster: "main"}), 400, "cluster")
	})
}
