package service_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestNamespaces checks QueueInfo.namespace: the _system default, the echo
// by queues.info and queues.list, the queues.list filter with pivot and
// limit, validation, the rule that queues.update cannot move a queue, and
// that names stay unique across namespaces.
func TestNamespaces(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		info := func(t *testing.T, name string) *pb.QueueInfo {
			t.Helper()
			res, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: name})
			require.NoError(t, err)
			return res
		}
		// list returns "name@namespace" of every queue listed.
		list := func(t *testing.T, req *pb.QueuesListRequest) []string {
			t.Helper()
			res, err := s.C.QueuesList(ctx, req)
			require.NoError(t, err)
			var out []string
			for _, q := range res.Items {
				out = append(out, q.QueueName+"@"+q.Namespace)
			}
			return out
		}

		s.CreateQueue(&pb.QueueInfo{QueueName: "plain"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "sys", Namespace: "_system"})
		for _, q := range []struct{ name, ns string }{
			{"a-1", "team-a"}, {"b-1", "team-b"}, {"a-2", "team-a"}, {"a-3", "team-a"}, {"b-2", "team-b"},
		} {
			s.CreateQueue(&pb.QueueInfo{QueueName: q.name, Namespace: q.ns})
		}

		t.Run("DefaultIsSystem", func(t *testing.T) {
			assert.Equal(t, "_system", info(t, "plain").Namespace)
			assert.Equal(t, "_system", info(t, "sys").Namespace)
			want := []string{"plain@_system", "sys@_system"}
			assert.Equal(t, want, list(t, &pb.QueuesListRequest{}), "an omitted namespace lists _system")
			assert.Equal(t, want, list(t, &pb.QueuesListRequest{Namespace: "_system"}))
		})
		t.Run("CreateWithNamespace", func(t *testing.T) {
			got := info(t, "a-2")
			assert.Equal(t, "team-a", got.Namespace)
			assert.Equal(t, "1m0s", got.LeaseTimeout, "other fields take their defaults")
		})
		t.Run("ListFiltered", func(t *testing.T) {
			assert.Equal(t, []string{"a-1@team-a", "a-2@team-a", "a-3@team-a"}, list(t, &pb.QueuesListRequest{Namespace: "team-a"}))
			assert.Equal(t, []string{"b-1@team-b", "b-2@team-b"}, list(t, &pb.QueuesListRequest{Namespace: "team-b"}))
			assert.Empty(t, list(t, &pb.QueuesListRequest{Namespace: "nobody"}))
			// The limit counts queues of the namespace, from the pivot on
			// (inclusive); a pivot may name a queue of another namespace.
			assert.Equal(t, []string{"a-1@team-a", "a-2@team-a"}, list(t, &pb.QueuesListRequest{Namespace: "team-a", Limit: 2}))
			assert.Equal(t, []string{"a-2@team-a", "a-3@team-a"}, list(t, &pb.QueuesListRequest{Namespace: "team-a", Pivot: "a-2", Limit: 2}))
			assert.Equal(t, []string{"b-1@team-b"}, list(t, &pb.QueuesListRequest{Namespace: "team-b", Pivot: "a-3", Limit: 1}))
			assert.Empty(t, list(t, &pb.QueuesListRequest{Namespace: "team-a", Pivot: "a-4"}))
		})
		t.Run("NamesUniqueAcrossNamespaces", func(t *testing.T) {
			err := s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "a-1", Namespace: "team-b"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "queue already exists", "a-1")
			assert.Equal(t, "team-a", info(t, "a-1").Namespace)
		})
		t.Run("Update", func(t *testing.T) {
			require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "a-3", MaxAttempts: 4}))
			require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "a-3", Namespace: "team-a", MaxAttempts: 5}))
			got := info(t, "a-3")
			assert.Equal(t, "team-a", got.Namespace)
			assert.Equal(t, int32(5), got.MaxAttempts)

			err := s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "a-3", Namespace: "team-b", MaxAttempts: 6})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid namespace", "'team-a'", "cannot move to 'team-b'")
			err = s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "a-3", Namespace: "a:b", MaxAttempts: 6})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid namespace", "':'")
			got = info(t, "a-3")
			assert.Equal(t, "team-a", got.Namespace)
			assert.Equal(t, int32(5), got.MaxAttempts, "a refused update changes nothing")
		})
		t.Run("Invalid", func(t *testing.T) {
			for _, c := range []struct {
				name, ns string
				parts    []string
			}{
				{"Whitespace", "team a", []string{"whitespace"}},
				{"Tab", "team\ta", []string{"whitespace or a control character"}},
				{"Tilde", "team~a", []string{"'~'"}},
				{"Colon", "team:a", []string{"':'"}},
				{"TooLong", strings.Repeat("n", 257), []string{"257 bytes", "limit is 256"}},
				{"TooLongMultibyte", strings.Repeat("é", 129), []string{"258 bytes", "limit is 256"}},
				{"Reserved", "_private", []string{"'_'", "reserved", "_system"}},
			} {
				t.Run(c.name, func(t *testing.T) {
					err := s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "bad-ns", Namespace: c.ns})
					servertest.RequireCode(t, err, styx.CodeBadRequest, append([]string{"invalid namespace"}, c.parts...)...)
					_, err = s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "bad-ns"})
					require.Error(t, err, "nothing was created")
				})
			}
			// The longest namespace is accepted.
			long := strings.Repeat("n", 256)
			s.CreateQueue(&pb.QueueInfo{QueueName: "long-ns", Namespace: long})
			assert.Equal(t, long, info(t, "long-ns").Namespace)
		})
		t.Run("SurvivesRestart", func(t *testing.T) {
			s.Restart()
			assert.Equal(t, "team-b", info(t, "b-2").Namespace)
			assert.Equal(t, "_system", info(t, "plain").Namespace)
			assert.Equal(t, []string{"b-1@team-b", "b-2@team-b"}, list(t, &pb.QueuesListRequest{Namespace: "team-b"}))
			assert.Equal(t, []string{"plain@_system", "sys@_system"}, list(t, &pb.QueuesListRequest{}))
		})
	})
}
