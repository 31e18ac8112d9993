package service_test

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestRedriveDryRunSaysWhatWillHappen (issue 28, 1): a dry run says, per
// destination queue, how many items a redrive would move and how many it
// would skip and why (source queue gone, key not covering it, loop cap);
// the task started after it does what it said and ends with a warning
// naming the reasons.
func TestRedriveDryRunSaysWhatWillHappen(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "pd-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "pd", DeadQueue: "pd-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "other", DeadQueue: "pd-dlq"})
		var items []deadItem
		for i := range 4 {
			items = append(items, deadItem{payload: "ok", source: "pd", reason: "expired", redrives: int32(i)})
		}
		items = append(items,
			deadItem{payload: "loop", source: "pd", reason: "expired", redrives: 10},
			deadItem{payload: "gone1", source: "pd-deleted", reason: "expired"},
			deadItem{payload: "gone2", source: "pd-deleted", reason: "expired"},
			deadItem{payload: "gone3", source: "pd-deleted", reason: "expired"},
			deadItem{payload: "elsewhere", source: "other", reason: "expired"})
		importDead(s, "pd-dlq", items...)

		// A key limited to pd*: "other" is not its to reach.
		c := s.Client(s.NewKey("pd-oncall", []string{"dead", "read"}, "pd*"))
		dry, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "pd-dlq", DryRun: true})
		require.NoError(t, err)
		assert.Equal(t, int64(9), dry.Matched)
		assert.Equal(t, int64(4), dry.WouldMove)
		assert.Equal(t, int64(5), dry.WouldSkip)
		assert.Equal(t, map[string]int64{"source_gone": 3, "loop_cap": 1, "not_covered": 1}, dry.SkipReasons)
		require.Len(t, dry.ByDestination, 3)
		assert.Equal(t, int64(4), dry.ByDestination["pd"].WouldMove)
		assert.Equal(t, int64(1), dry.ByDestination["pd"].WouldSkip)
		assert.Equal(t, map[string]int64{"loop_cap": 1}, dry.ByDestination["pd"].SkipReasons)
		assert.Equal(t, int64(0), dry.ByDestination["pd-deleted"].WouldMove)
		assert.Equal(t, map[string]int64{"source_gone": 3}, dry.ByDestination["pd-deleted"].SkipReasons)
		// The key does not cover "other": its items are counted, its name
		// is not shown (issue 36).
		assert.Equal(t, map[string]int64{"not_covered": 1}, dry.ByDestination[auth.HiddenQueue].SkipReasons)
		assert.NotContains(t, dry.ByDestination, "other")
		require.Len(t, s.Items("pd-dlq"), 9, "a dry run moves nothing")

		task, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "pd-dlq", All: true})
		require.NoError(t, err)
		task = waitTask(s, task.TaskId)
		assert.Equal(t, "completed", task.Status)
		assert.Equal(t, dry.WouldMove, task.Moved, "the task does what the dry run said")
		assert.Equal(t, dry.WouldSkip, task.Skipped)
		assert.Equal(t, dry.SkipReasons, task.SkipReasons)
		assert.Equal(t, map[string]int64{"source_gone": 3}, task.ByQueue["pd-deleted"].SkipReasons)
		assert.Equal(t, "5 of 9 items stay in the dead-letter queue: 1 already redriven max_redrive_count times; "+
			"1 bound for a queue the API key may not reach; 3 whose destination queue does not exist", task.Warning)
		// The warning is kept: listed again, the task still says it.
		list, err := s.C.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: "pd-dlq"})
		require.NoError(t, err)
		require.NotEmpty(t, list.Tasks)
		assert.Equal(t, task.Warning, list.Tasks[0].Warning)

		// A task that moved everything has no warning.
		importDead(s, "pd-dlq", deadItem{payload: "fine", source: "pd", reason: "explicit"})
		task, err = s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "pd-dlq", Filter: &pb.DeadFilter{Reason: "explicit"}})
		require.NoError(t, err)
		task = waitTask(s, task.TaskId)
		assert.Equal(t, int64(1), task.Moved)
		assert.Empty(t, task.Warning)
		assert.Empty(t, task.SkipReasons)
	})
}

// TestBrowserAtRoot (issue 28, 2): GET / from a browser (Accept: text/html)
// is redirected to the UI; any other client gets a short JSON pointer to
// the console and the API (issue 39; it was a 501 "no such method"); the
// start-up log line names the UI's address.
func TestBrowserAtRoot(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, admin := servertest.StartAuth(t, b)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.D.Endpoint()+"/", nil)
		require.NoError(t, err)
		req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusFound, resp.StatusCode)
		assert.Equal(t, "/ui/", resp.Header.Get("Location"))

		code, ct, body := raw(s, http.MethodGet, "/", "", "Bearer "+admin, nil)
		assert.Equal(t, 200, code, "%s", body)
		assert.Equal(t, "application/json", ct)
		assert.Contains(t, string(body), `"console":"/ui/"`)
		assert.Contains(t, string(body), "/v1/")
		assert.Contains(t, s.Logs.String(), `msg="styx serving"`)
		assert.Contains(t, s.Logs.String(), "ui=http://"+s.D.Addr()+"/ui/")
	})
}

// TestDeadFilterReferenceAndPayload (issue 28, 7): filter.reference (exact)
// and filter.payload_contains (substring of the payload) select dead items
// in dead.list, dead.delete and dead.redrive; dead.groups, which reads
// counts, refuses them; an over-long value is a 400 naming the field.
func TestDeadFilterReferenceAndPayload(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "fr-dlq", RequestedPartitions: 2})
		s.CreateQueue(&pb.QueueInfo{QueueName: "fr", DeadQueue: "fr-dlq"})
		imp := &pb.StorageItemsImportRequest{QueueName: "fr-dlq"}
		for i, p := range []string{`{"order":"A-17","note":"gift"}`, `{"order":"B-2"}`, `{"order":"A-170"}`, `{"order":"C-9","note":"gift wrap"}`} {
			imp.Items = append(imp.Items, &pb.StorageItem{Payload: []byte(p), Reference: fmt.Sprintf("ord-%d", i),
				SourceQueue: "fr", DeadReason: "explicit", DeadAt: servertest.At(time.Now()), LastError: "bad"})
		}
		_, err := s.C.StorageItemsImport(ctx, imp)
		require.NoError(t, err)

		got := deadList(s, "fr-dlq", &pb.DeadFilter{Reference: "ord-1"}, 10)
		require.Len(t, got, 1)
		assert.Equal(t, `{"order":"B-2"}`, string(got[0].Payload))
		assert.Equal(t, "ord-1", got[0].Reference)
		assert.Empty(t, deadList(s, "fr-dlq", &pb.DeadFilter{Reference: "ord"}, 10), "reference matches exactly")
		assert.Equal(t, []string{`{"order":"A-17","note":"gift"}`, `{"order":"A-170"}`},
			payloads(deadList(s, "fr-dlq", &pb.DeadFilter{PayloadContains: `"A-17`}, 1)))
		assert.Equal(t, []string{`{"order":"C-9","note":"gift wrap"}`},
			payloads(deadList(s, "fr-dlq", &pb.DeadFilter{PayloadContains: "gift", Reference: "ord-3"}, 10)), "every set field must match")

		dry, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "fr-dlq", Filter: &pb.DeadFilter{PayloadContains: "gift"}, DryRun: true})
		require.NoError(t, err)
		assert.Equal(t, int64(2), dry.Matched)
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "fr-dlq", Filter: &pb.DeadFilter{Reference: "ord-0"}})
		require.NoError(t, err)
		assert.Equal(t, "ord-0", task.Filter.Reference, "the task keeps its filter")
		task = waitTask(s, task.TaskId)
		assert.Equal(t, int64(1), task.Moved)
		back := s.Items("fr")
		require.Len(t, back, 1)
		assert.Equal(t, "ord-0", back[0].Reference)

		del, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "fr-dlq", Filter: &pb.DeadFilter{PayloadContains: "A-170"}})
		require.NoError(t, err)
		assert.Equal(t, int64(1), del.Deleted)
		assert.Equal(t, []string{`{"order":"B-2"}`, `{"order":"C-9","note":"gift wrap"}`}, payloads(deadList(s, "fr-dlq", nil, 10)))

		_, err = s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "fr-dlq", Filter: &pb.DeadFilter{Reference: "ord-1"}})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "filter.reference")
		_, err = s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "fr-dlq", Filter: &pb.DeadFilter{PayloadContains: strings.Repeat("x", 1025)}})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "filter.payload_contains", "1025 bytes, the limit is 1024")
		_, err = s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "fr-dlq", Filter: &pb.DeadFilter{Reference: strings.Repeat("r", 1025)}})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "filter.reference", "the limit is 1024")
	})
}

// TestDeadEdit (issue 28, 8): dead.edit replaces a dead item's payload (and
// kind and reference when given) in place, records the old payload's size
// and hash with who edited it and when in the item's history, is audited,
// needs the dead scope, refuses a leased item; the edited item redrives with
// its new payload.
func TestDeadEdit(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "ed-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "ed", DeadQueue: "ed-dlq", RequestedPartitions: 2})
		s.Produce("ed", `{"amount":"12,50"}`, `{"amount":"3"}`)
		for range 2 {
			res := s.Lease("ed", 1)
			s.Retry("ed", res.Partition, &pb.QueueRetryItem{Id: res.Items[0].Id, Dead: true, Error: "parse amount: invalid syntax"})
		}
		dead := waitDeadList(s, "ed-dlq", 2)
		// A consumer of the dead-letter queue holds one item; the other is
		// edited.
		lease, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "ed-dlq", BatchSize: 1, ClientId: "dlq-consumer", RequestTimeout: "5s"})
		require.NoError(t, err)
		leased := lease.Items[0].Id
		target := dead[0]
		if target.Id == leased {
			target = dead[1]
		}
		oldPayload := string(target.Payload)
		groups, err := s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "ed-dlq"})
		require.NoError(t, err)

		fixer := s.Client(s.NewKey("fixer", []string{"dead"}))
		kind := "payment.v2"
		got, err := fixer.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "ed-dlq", Id: target.Id, Payload: []byte(`{"amount":"12.50"}`), Kind: &kind})
		require.NoError(t, err)
		assert.Equal(t, target.Id, got.Id, "the item keeps its id")
		assert.Equal(t, `{"amount":"12.50"}`, string(got.Payload))
		assert.Equal(t, "payment.v2", got.Kind)
		assert.Equal(t, target.Reference, got.Reference, "reference unset: unchanged")

		again := deadList(s, "ed-dlq", &pb.DeadFilter{Ids: []string{target.Id}}, 10)
		require.Len(t, again, 1)
		it := again[0]
		assert.Equal(t, `{"amount":"12.50"}`, string(it.Payload), "stored")
		assert.Equal(t, "payment.v2", it.Kind)
		assert.Equal(t, "parse amount: invalid syntax", it.LastError, "the last error stays: the item is in its group")
		assert.Equal(t, target.Fingerprint, it.Fingerprint)
		last := it.Errors[len(it.Errors)-1]
		assert.Equal(t, fmt.Sprintf("payload edited by key 'fixer': was %d bytes (sha256 %x), now 18 bytes (sha256 %x); kind was 'test'",
			len(oldPayload), sha256.Sum256([]byte(oldPayload)), sha256.Sum256([]byte(`{"amount":"12.50"}`))), last.Error)
		assert.WithinDuration(t, time.Now(), last.At.AsTime(), time.Minute)
		after, err := s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "ed-dlq"})
		require.NoError(t, err)
		assert.Equal(t, groups.TotalItems, after.TotalItems)
		assert.Equal(t, groups.TotalGroups, after.TotalGroups)
		servertest.Eventually(t, func() bool { return strings.Contains(s.Logs.String(), "audit: dead.edit") }, "dead.edit is audited")
		assert.Contains(t, s.Logs.String(), "key=fixer")

		// Clearing the reference with "" and a payload edited again.
		empty := ""
		got, err = fixer.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "ed-dlq", Id: target.Id, Payload: []byte(`{"amount":"12.5"}`), Reference: &empty})
		require.NoError(t, err)
		assert.Empty(t, got.Reference)

		// Needs the dead scope; refused for unknown items, bad ids, leased
		// items, ordinary queues and over-long fields.
		_, err = s.Client(s.NewKey("reader", []string{"read"})).DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "ed-dlq", Id: target.Id, Payload: []byte("x")})
		servertest.RequireCode(t, err, styx.CodeForbidden)
		_, err = fixer.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "ed-dlq", Id: "zz", Payload: []byte("x")})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "id")
		_, err = s.C.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "ed", Id: target.Id, Payload: []byte("x")})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "not a dead-letter queue")
		_, err = s.C.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "ed-dlq", Id: target.Id, Payload: []byte("x"), Kind: ptr(strings.Repeat("k", 1025))})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "kind", "the limit is 1024")
		_, err = s.C.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "ed-dlq", Id: leased, Payload: []byte("x")})
		servertest.RequireCode(t, err, styx.CodeConflict, "leased")
		require.NoError(t, s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "ed-dlq", Partition: lease.Partition, Ids: []string{leased}}))
		_, err = s.C.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "ed-dlq", Id: leased, Payload: []byte("x")})
		servertest.RequireCode(t, err, styx.CodeNotFound)

		// Survives a restart, and redrives with the new payload.
		{
			s.Restart()
			again = deadList(s, "ed-dlq", &pb.DeadFilter{Ids: []string{target.Id}}, 10)
			require.Len(t, again, 1)
			assert.Equal(t, `{"amount":"12.5"}`, string(again[0].Payload))
			task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "ed-dlq", Filter: &pb.DeadFilter{Ids: []string{target.Id}}})
			require.NoError(t, err)
			require.Equal(t, int64(1), waitTask(s, task.TaskId).Moved)
			back := s.Items("ed")
			require.Len(t, back, 1)
			assert.Equal(t, `{"amount":"12.5"}`, string(back[0].Payload))
			assert.Equal(t, "payment.v2", back[0].Kind)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// waitDeadList polls until queue lists n dead items and returns them.
func waitDeadList(s *servertest.Server, queue string, n int) []*pb.StorageItem {
	s.T.Helper()
	var got []*pb.StorageItem
	servertest.Eventually(s.T, func() bool { got = deadList(s, queue, nil, 100); return len(got) == n }, "dead-letter queue %s should hold %d items", queue, n)
	return got
}

// TestQueuesHistory (issue 28, 6): queues.history gives a queue's last hour
// a point per minute: items produced, completed and dead-lettered, depth,
// and on a dead-letter queue the arrivals by error group; an empty
// queue_name sums every queue. Time is the fake clock's.
func TestQueuesHistory(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		clk := clock.NewFake(time.Now().Truncate(time.Minute).Add(10 * time.Second))
		s := servertest.StartWith(t, b, func(cfg *daemon.Config) { cfg.Clock = clk })
		s.CreateQueue(&pb.QueueInfo{QueueName: "hi-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "hi", DeadQueue: "hi-dlq"})
		history := func(q string) *pb.QueuesHistoryResponse {
			t.Helper()
			h, err := s.C.QueuesHistory(ctx, &pb.QueuesHistoryRequest{QueueName: q})
			require.NoError(t, err)
			require.Len(t, h.Points, 60)
			assert.EqualValues(t, 60, h.IntervalSeconds)
			return h
		}
		history("hi-dlq") // the groups' starting point

		s.Produce("hi", "1", "2", "3", "4", "5")
		clk.Advance(time.Minute)
		s.Produce("hi", "6", "7", "8")
		res := s.Lease("hi", 3)
		require.Len(t, res.Items, 3)
		s.Complete("hi", res.Partition, res.Items[0].Id, res.Items[1].Id)
		s.Retry("hi", res.Partition, &pb.QueueRetryItem{Id: res.Items[2].Id, Dead: true, Error: "upstream 503 for order 17"})
		waitDeadList(s, "hi-dlq", 1)

		h := history("hi")
		now, before := h.Points[59], h.Points[58]
		assert.Equal(t, clk.Now().Truncate(time.Minute).UTC(), now.At.AsTime(), "the last point is the current minute")
		assert.Equal(t, time.Minute, now.At.AsTime().Sub(before.At.AsTime()))
		assert.EqualValues(t, 5, before.Produced)
		assert.EqualValues(t, 3, now.Produced)
		assert.EqualValues(t, 2, now.Completed)
		assert.EqualValues(t, 1, now.DeadLettered)
		assert.EqualValues(t, 5, now.Depth, "8 produced, 2 completed, 1 dead")
		assert.EqualValues(t, -1, h.Points[0].Depth, "no sample an hour ago")

		d := history("hi-dlq")
		require.Len(t, d.Points[59].DeadByGroup, 1)
		for fp, n := range d.Points[59].DeadByGroup {
			assert.EqualValues(t, 1, n)
			assert.Equal(t, "upstream <n> for order <n>", d.GroupPatterns[fp])
		}
		assert.EqualValues(t, 1, d.Points[59].Depth)

		all := history("")
		assert.EqualValues(t, 3, all.Points[59].Produced)
		assert.EqualValues(t, 6, all.Points[59].Depth, "5 in hi, 1 in hi-dlq")

		// An hour later the minutes have gone round.
		clk.Advance(time.Hour)
		h = history("hi")
		for _, p := range h.Points {
			assert.Zero(t, p.Produced)
		}
		_, err := s.C.QueuesHistory(ctx, &pb.QueuesHistoryRequest{QueueName: "nope"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "nope")
	})
}

// TestRedriveTaskNamesItsErrorPattern (issue 28, 9): a task (and a dry run)
// of an error group carries the group's pattern, so that people read the
// error's shape, not its fingerprint; it keeps it once the group is gone.
func TestRedriveTaskNamesItsErrorPattern(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "pt-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "pt", DeadQueue: "pt-dlq"})
		s.Produce("pt", "a", "b")
		res := s.Lease("pt", 2)
		var retry []*pb.QueueRetryItem
		for i, it := range res.Items {
			retry = append(retry, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: fmt.Sprintf("order %d not found", 1000+i)})
		}
		s.Retry("pt", res.Partition, retry...)
		waitDeadList(s, "pt-dlq", 2)
		g, err := s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "pt-dlq"})
		require.NoError(t, err)
		require.Len(t, g.Groups, 1)
		f := &pb.DeadFilter{Fingerprint: g.Groups[0].Fingerprint}
		dry, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "pt-dlq", Filter: f, DryRun: true})
		require.NoError(t, err)
		assert.Equal(t, "order <n> not found", dry.ErrorPattern)
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "pt-dlq", Filter: f})
		require.NoError(t, err)
		task = waitTask(s, task.TaskId)
		assert.Equal(t, int64(2), task.Moved)
		assert.Equal(t, "order <n> not found", task.ErrorPattern, "kept after the group emptied")
		s.Restart()
		task, err = s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		assert.Equal(t, "order <n> not found", task.ErrorPattern, "stored with the task")
	})
}
