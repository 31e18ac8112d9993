package service_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// outage returns the backend to run an outage test on (for postgres, a
// cluster of the test's own, which it can stop; it skips without one), how
// to take a server's storage down and bring it back (faulty.SetDown on
// memory and Pebble, stopping the cluster on postgres), and the word every
// failure names.
func outage(t *testing.T, b servertest.Backend) (_ servertest.Backend, down, up func(*servertest.Server), cause string) {
	if b.Name != "postgres" {
		return b, func(s *servertest.Server) { s.Faults.SetDown(errors.New("injected: outage")) },
			func(s *servertest.Server) { s.Faults.SetDown(nil) }, "injected: outage"
	}
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	if os.Getenv(pgtest.EnvURL) == "" && os.Getenv(pgtest.EnvRequire) == "" {
		t.Skipf("%s is not set (see internal/pgtest)", pgtest.EnvURL)
	}
	pg := pgtest.StartServer(t)
	return servertest.Backend{Name: "postgres", URL: pgtest.SchemaURL(t, pg.URL)}, func(*servertest.Server) { pg.Stop(t) }, func(*servertest.Server) { pg.Start(t) }, "postgres"
}

// TestStorageOutageSameCode: the same outage — every storage call failing,
// injected with faulty.SetDown on memory and Pebble, a stopped PostgreSQL
// cluster of the test's own — is answered with the same code and message
// shape on every backend, by every call that needs storage: 453 "storage
// unavailable; ..." naming the cause. (Before storage errors were typed,
// queues.list, queues.create and storage/items.list answered 500 on memory
// and Pebble.) Once storage is back, the same server serves again.
func TestStorageOutageSameCode(t *testing.T) {
	for _, b := range servertest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			b, takeDown, bringUp, cause := outage(t, b)
			s := servertest.Start(t, b)
			down, up := func() { takeDown(s) }, func() { bringUp(s) }
			s.CreateQueue(&pb.QueueInfo{QueueName: "out-dlq"})
			s.CreateQueue(&pb.QueueInfo{QueueName: "out", DeadQueue: "out-dlq"})
			s.Produce("out", "before-1", "before-2")

			down()
			calls := []struct {
				name string
				call func() error
			}{
				{"queue.produce", func() error {
					return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "out", RequestTimeout: "10s",
						Items: []*pb.QueueProduceItem{{Bytes: []byte("during")}}})
				}},
				{"queue.lease", func() error {
					_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "out", BatchSize: 1, ClientId: "c", RequestTimeout: "10s"})
					return err
				}},
				{"queues.list", func() error {
					_, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{Limit: 10})
					return err
				}},
				{"queues.create", func() error {
					return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "new"})
				}},
				{"storage/items.list", func() error {
					_, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "out", Limit: 10})
					return err
				}},
				{"dead.list", func() error {
					_, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "out-dlq", Limit: 10})
					return err
				}},
				{"dead.groups", func() error {
					_, err := s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "out-dlq", Limit: 10})
					return err
				}},
				{"dead.redrive", func() error {
					_, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "out-dlq", All: true})
					return err
				}},
			}
			for _, c := range calls {
				err := c.call()
				require.Error(t, err, c.name)
				require.Equal(t, styx.CodeUnavailable, styx.ErrorCode(err), "%s: %v", c.name, err)
				var serr *styx.Error
				require.ErrorAs(t, err, &serr)
				require.Regexp(t, `^storage unavailable; `, serr.Message, c.name)
				require.Contains(t, serr.Message, cause, c.name)
			}
			up()

			// The same server serves again: nothing of the outage was kept.
			require.Eventually(t, func() bool {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "out", RequestTimeout: "10s",
					Items: []*pb.QueueProduceItem{{Bytes: []byte("after")}}}) == nil
			}, 30*time.Second, 10*time.Millisecond, "produce after the outage")
			var got []string
			for _, it := range s.Items("out") {
				got = append(got, string(it.Payload))
			}
			require.Equal(t, []string{"before-1", "before-2", "after"}, got)
		})
	}
}
