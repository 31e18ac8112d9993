package service_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// TestActivityLog: the audited calls on a dead-letter queue (delete,
// redrive, edit) are in activity.list with the key that made them and what
// they did, newest first, on every backend; a dry run is not; they survive
// a restart (memory and Pebble: the same store) and, on PostgreSQL, a
// second node reads them; a key reads only the records of the queues it
// covers (issue 49).
func TestActivityLog(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		opsKey := s.NewKey("ops", []string{"dead", "read"})
		ops := s.Client(opsKey)
		dlq := withExpiredDead(s, "act", 10)
		items := deadList(s, dlq, nil, 100)
		require.Len(t, items, 10)
		ids := func(its []*pb.StorageItem) []string {
			out := make([]string, len(its))
			for i, it := range its {
				out[i] = it.Id
			}
			return out
		}

		del, err := ops.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, Filter: &pb.DeadFilter{Ids: ids(items[:6])}})
		require.NoError(t, err)
		require.EqualValues(t, 6, del.Deleted)
		_, err = ops.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: &pb.DeadFilter{Ids: ids(items[6:9])}, DryRun: true})
		require.NoError(t, err)
		task, err := ops.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: &pb.DeadFilter{Ids: ids(items[6:9])}})
		require.NoError(t, err)
		edited, err := ops.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: dlq, Id: items[9].Id, Payload: []byte("fixed")})
		require.NoError(t, err)

		// Read at once after the answers: each record is stored before its
		// call is answered.
		check := func(t *testing.T, c *styx.Client) {
			t.Helper()
			res, err := c.ActivityList(ctx, &pb.ActivityListRequest{QueueName: dlq})
			require.NoError(t, err, s.Logs.String())
			require.Len(t, res.Records, 5, "edit, redrive, delete, the import, the creation (no dry run): %v", res.Records)
			require.Empty(t, res.NextPivot)
			got := res.Records
			for _, r := range got[:3] {
				require.Equal(t, "ops", r.KeyName)
				require.Equal(t, dlq, r.QueueName)
				require.Equal(t, "v1", r.Door)
				require.NotNil(t, r.At)
			}
			require.Equal(t, "dead.edit", got[0].Op)
			require.Equal(t, map[string]string{"item": edited.Id, "payload_bytes": "5"}, details(got[0]))
			require.Equal(t, "dead.redrive", got[1].Op)
			require.Equal(t, map[string]string{"task": task.TaskId, "matched": "3", "dry_run": "false"}, details(got[1]))
			require.Equal(t, "dead.delete", got[2].Op)
			require.Equal(t, map[string]string{"deleted": "6"}, details(got[2]))
			require.Equal(t, "storage/items.import", got[3].Op)
			require.Equal(t, "bootstrap-admin", got[3].KeyName)
			require.Equal(t, map[string]string{"items": "10"}, details(got[3]))
			require.Equal(t, "queues.create", got[4].Op)

			// Pages: two, then two, linked by the pivot.
			p1, err := c.ActivityList(ctx, &pb.ActivityListRequest{QueueName: dlq, Limit: 2})
			require.NoError(t, err)
			require.Len(t, p1.Records, 2)
			require.NotEmpty(t, p1.NextPivot)
			p2, err := c.ActivityList(ctx, &pb.ActivityListRequest{QueueName: dlq, Limit: 2, Pivot: p1.NextPivot})
			require.NoError(t, err)
			require.Len(t, p2.Records, 2)
			require.Equal(t, got[2].Id, p2.Records[0].Id)
			require.Equal(t, got[3].Id, p2.Records[1].Id)
		}
		check(t, ops)

		// Another key's view: the records of the queues it covers only.
		other := s.Client(s.NewKey("other", []string{"read"}, "other-*"))
		_, err = other.ActivityList(ctx, &pb.ActivityListRequest{QueueName: dlq})
		servertest.RequireCode(t, err, styx.CodeForbidden, "not for '"+dlq+"'")
		s.CreateQueue(&pb.QueueInfo{QueueName: "other-q"})
		res, err := other.ActivityList(ctx, &pb.ActivityListRequest{})
		require.NoError(t, err)
		require.Len(t, res.Records, 1, "only other-q's creation: %v", res.Records)
		require.Equal(t, "queues.create", res.Records[0].Op)
		require.Equal(t, "other-q", res.Records[0].QueueName)

		// Bad input names the field.
		_, err = ops.ActivityList(ctx, &pb.ActivityListRequest{Limit: 1001})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid limit")
		_, err = ops.ActivityList(ctx, &pb.ActivityListRequest{Pivot: "x"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid pivot")

		if b.Postgres() {
			// A second node on the same database reads the first's records.
			second := servertest.StartWith(t, b, s.Configure)
			check(t, second.Client(opsKey))
			return
		}
		s.Restart()
		check(t, s.Client(opsKey))
	})
}

// details is an activity record's details as a map.
func details(r *pb.ActivityRecord) map[string]string {
	out := map[string]string{}
	for _, d := range r.Details {
		out[d.Name] = d.Value
	}
	return out
}

// TestActivityWriteFails: a record the store refuses does not fail its
// call (what it did is done): the call is answered as done, the failure is
// logged at ERROR with the record, and styx_activity_write_errors_total
// counts it (embedded backends: the fault is injected into their store).
func TestActivityWriteFails(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		s := servertest.Start(t, b)
		dlq := withExpiredDead(s, "actfail", 3)
		s.Faults.SetActivityHook(func(store.ActivityRecord) error { return errors.New("disk on fire") })
		del, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, All: true})
		require.NoError(t, err, "the delete is done, whatever became of its record")
		require.EqualValues(t, 3, del.Deleted)
		require.Empty(t, deadList(s, dlq, nil, 100))
		require.Contains(t, s.Logs.String(), "activity: record not stored; the call was done")
		require.Contains(t, s.Logs.String(), "disk on fire")
		require.Equal(t, "styx_activity_write_errors_total 1", metricLine(scrape(s), "styx_activity_write_errors_total"))
		s.Faults.SetActivityHook(nil)
		res, err := s.C.ActivityList(ctx, &pb.ActivityListRequest{QueueName: dlq})
		require.NoError(t, err)
		for _, r := range res.Records {
			require.NotEqual(t, "dead.delete", r.Op, "the record was not stored")
		}
	})
}
