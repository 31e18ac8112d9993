package service_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestResentWriteAfterApplied (issue 48, 3): what a client that sends a
// write again after a 453 gets when the first try was applied, as the
// README's Durability table says. A complete, a retry, a release and a
// dead retry sent again answer 400 "not leased" and change nothing, even
// once the retried or released item was leased again (it is back under a
// new id); a renew sent again renews again.
func TestResentWriteAfterApplied(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		dlq := withDLQ(s, "rs", &pb.QueueInfo{})
		s.Produce("rs", "done", "retried", "released", "dead")
		lease := s.Lease("rs", 4)
		require.Len(t, lease.Items, 4)
		id := map[string]string{}
		for _, it := range lease.Items {
			id[string(it.Bytes)] = it.Id
		}
		p := lease.Partition
		notLeased := func(err error) {
			t.Helper()
			servertest.RequireCode(t, err, styx.CodeBadRequest, "not leased")
		}

		renew := &pb.QueueRenewRequest{QueueName: "rs", Partition: p, Ids: []string{id["done"]}}
		_, err := s.C.QueueRenew(ctx, renew)
		require.NoError(t, err)
		_, err = s.C.QueueRenew(ctx, renew)
		require.NoError(t, err, "a renew sent again renews again")

		complete := &pb.QueueCompleteRequest{QueueName: "rs", Partition: p, Ids: []string{id["done"]}}
		require.NoError(t, s.C.QueueComplete(ctx, complete))
		notLeased(s.C.QueueComplete(ctx, complete))

		for _, it := range []*pb.QueueRetryItem{{Id: id["retried"]}, {Id: id["released"], Release: true}, {Id: id["dead"], Dead: true}} {
			s.Retry("rs", p, it)
		}
		// The retried and released items are leased again, under new ids.
		again := s.Lease("rs", 2)
		require.ElementsMatch(t, []string{"retried", "released"}, payloads2(again.Items))
		for _, it := range []*pb.QueueRetryItem{{Id: id["retried"]}, {Id: id["released"], Release: true}, {Id: id["dead"], Dead: true}} {
			_, err := s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "rs", Partition: p, Items: []*pb.QueueRetryItem{it}})
			notLeased(err)
		}
		// Nothing changed: the new leases hold, the dead item is dead once.
		ids := make([]string, len(again.Items))
		for i, it := range again.Items {
			ids[i] = it.Id
		}
		require.NoError(t, s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "rs", Partition: again.Partition, Ids: ids}),
			"the new leases were not touched by the resent calls")
		require.Equal(t, []string{"dead"}, payloads(s.WaitItems(dlq, 1)))
		require.Empty(t, s.Items("rs"))
	})
}

// payloads2 returns the payloads of leased items.
func payloads2(items []*pb.QueueLeaseItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = string(it.Bytes)
	}
	return out
}
