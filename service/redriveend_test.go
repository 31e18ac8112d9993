package service_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestRedriveEndNeverReportedUnstored (issue 48, 1): a redrive whose
// storage fails under it (a full disk with the free-space watermark off on
// Pebble, a store failing every call with ENOSPC on memory, a stopped
// cluster on PostgreSQL) is never reported ended while its stored record
// says running: while the end cannot be stored it is reported running.
// Once storage is back, its end is stored before it is shown; a new
// redrive of the same items then starts, and after a restart the first
// task is reported as it was before it (it does not resume), so no two
// tasks run over the same items; every item reaches its queue once. Before
// the fix, the task was reported failed at once while its record stayed
// running, the new redrive started, and the restart resumed the first
// task beside it.
func TestRedriveEndNeverReportedUnstored(t *testing.T) {
	t.Parallel()
	for _, b := range servertest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			var down, up func(*servertest.Server)
			switch b.Name {
			case "memory":
				down = func(s *servertest.Server) { s.Faults.SetDown(fmt.Errorf("injected: %w", syscall.ENOSPC)) }
				up = func(s *servertest.Server) { s.Faults.SetDown(nil) }
			case "pebble":
				var full atomic.Bool
				fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
					switch op.Kind {
					case errorfs.OpCreate, errorfs.OpReuseForWrite, errorfs.OpFileWrite, errorfs.OpFileWriteAt,
						errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
						if full.Load() {
							return syscall.ENOSPC
						}
					}
					return nil
				}))
				b = pebbleOn(func() vfs.FS { return fs }, pebble.Config{MinFreeBytes: -1, CheckInterval: 10 * time.Millisecond})
				down, up = func(*servertest.Server) { full.Store(true) }, func(*servertest.Server) { full.Store(false) }
			default:
				b, down, up, _ = outage(t, b)
			}
			s := servertest.Start(t, b)
			const n = 100
			dlq := withExpiredDead(s, "re", n)
			first, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 20, All: true})
			require.NoError(t, err)
			servertest.Eventually(t, func() bool { return getTask(s, first.TaskId).Moved > 0 }, "the task moves")

			// Storage fails: the task's steps fail, then it fails, and its
			// end cannot be stored. Until that was tried, nothing it
			// reports may say it ended.
			down(s)
			seen := map[string]int{}
			tried := func() bool {
				logs := s.Logs.String()
				return strings.Contains(logs, "redrive: persist finished task") || strings.Contains(logs, "claim was lost")
			}
			deadline := time.Now().Add(20 * time.Second)
			for !tried() {
				require.True(t, time.Now().Before(deadline), "the task never tried to store its end; logs:\n%s", s.Logs.String())
				if got, err := s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: first.TaskId}); err == nil {
					seen[got.Status]++
				}
				time.Sleep(10 * time.Millisecond) // a poll of the task while the fault lasts
			}
			for range 20 { // a little longer: what the task shows once its end was not stored
				if got, err := s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: first.TaskId}); err == nil {
					seen[got.Status]++
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("statuses reported while storage failed: %v", seen)
			for st := range seen {
				require.Equal(t, "running", st, "reported while its end could not be stored (seen %v)", seen)
			}

			up(s)
			var ended *pb.RedriveTask
			require.Eventually(t, func() bool {
				got, err := s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: first.TaskId})
				if err != nil {
					return false // storage coming back
				}
				ended = got
				return got.Status == "completed" || got.Status == "failed"
			}, 60*time.Second, 20*time.Millisecond, "the first task ends once storage is back")
			t.Logf("the first task %s after storage came back: moved %d of %d (%s)", ended.Status, ended.Moved, ended.Matched, ended.FailureReason)
			rest := int64(0)
			if ended.Status != "completed" {
				// A new redrive of the same items: the rest.
				second, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 50, All: true})
				require.NoError(t, err, "a redrive after the first ended")
				rest = second.Matched
				s.Restart()
				again := getTask(s, first.TaskId)
				require.Equal(t, ended.Status, again.Status, "the first task after a restart is what it was reported before it")
				running := 0
				list, err := s.C.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: dlq})
				require.NoError(t, err)
				for _, task := range list.Tasks {
					if task.Status == "running" {
						running++
					}
				}
				require.LessOrEqual(t, running, 1, "tasks running over the same items after a restart: %v", list.Tasks)
				done := waitTask(s, second.TaskId)
				require.Equal(t, "completed", done.Status)
			}
			// The counts may miss a step whose moves were stored but not
			// its progress (PostgreSQL): the items themselves tell.
			t.Logf("the first task moved %d, the second matched %d, of %d items", ended.Moved, rest, n)
			want := make([]string, n)
			for i := range want {
				want[i] = fmt.Sprint(i)
			}
			requireOnce(s, "re", want)
			require.Empty(t, s.Items(dlq))
		})
	}
}
