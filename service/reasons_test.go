package service_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// errorReply is a duh.v1.Reply as JSON.
type errorReply struct {
	Code    int               `json:"code"`
	Message string            `json:"message"`
	Details map[string]string `json:"details"`
}

// postJSON posts body to the server's /v1 path as JSON and returns the
// status and the decoded reply of an error answer.
func postJSON(t *testing.T, s *servertest.Server, path, body string) (int, errorReply) {
	t.Helper()
	resp, err := http.Post(s.Endpoint+path, "application/json", bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var reply errorReply
	require.NoError(t, json.Unmarshal(b, &reply), string(b))
	return resp.StatusCode, reply
}

// requireReason asserts err is a /v1 error with code and reason, as the
// Go client reads it.
func requireReason(t *testing.T, err error, code int, reason string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, styx.ErrorCode(err), err.Error())
	require.Equal(t, reason, styx.ErrorReason(err), err.Error())
}

// TestErrorReasons: every /v1 error reply carries its reason in
// details["reason"] (docs/wire-contract.md), through the whole server on
// every backend, in protobuf (the Go client) and in JSON: a validation
// error, a queue that does not exist or exists, an empty lease, and a
// storage outage (faulty.SetDown on memory and Pebble, a stopped
// PostgreSQL cluster), whose reason is the same on every backend.
func TestErrorReasons(t *testing.T) {
	for _, b := range servertest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			b, takeDown, bringUp, cause := outage(t, b)
			s := servertest.Start(t, b)
			s.CreateQueue(&pb.QueueInfo{QueueName: "why"})

			err := s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "why", RequestTimeout: "1h",
				Items: []*pb.QueueProduceItem{{Bytes: []byte("x")}}})
			// Over 15m: 400; then none at all, in JSON.
			requireReason(t, err, styx.CodeBadRequest, styx.ReasonInvalidArgument)
			code, reply := postJSON(t, s, "/v1/queue.produce", `{"queue_name":"why","items":[{"utf8":"x"}]}`)
			require.Equal(t, 400, code)
			require.Equal(t, "invalid_argument", reply.Details["reason"], reply.Message)

			err = s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "ghost", RequestTimeout: "10s",
				Items: []*pb.QueueProduceItem{{Bytes: []byte("x")}}})
			requireReason(t, err, styx.CodeBadRequest, styx.ReasonQueueNotFound)
			require.True(t, styx.IsQueueNotExist(err))

			err = s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "why"})
			requireReason(t, err, styx.CodeBadRequest, styx.ReasonQueueExists)
			require.True(t, styx.IsQueueExists(err))

			_, err = s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "why", BatchSize: 1, ClientId: "c", RequestTimeout: "10ms"})
			requireReason(t, err, styx.CodeRetry, styx.ReasonRequestTimeout)
			require.True(t, styx.IsNoItems(err))

			code, reply = postJSON(t, s, "/v1/queue.nope", `{}`)
			require.Equal(t, 501, code)
			require.Equal(t, "unimplemented", reply.Details["reason"])

			takeDown(s)
			err = s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "why", RequestTimeout: "10s",
				Items: []*pb.QueueProduceItem{{Bytes: []byte("during")}}})
			requireReason(t, err, styx.CodeUnavailable, styx.ReasonStorageUnavailable)
			require.Regexp(t, `^storage unavailable; `, err.(*styx.Error).Message)
			require.Contains(t, err.Error(), cause)
			code, reply = postJSON(t, s, "/v1/queues.list", `{"limit":10}`)
			require.Equal(t, 453, code)
			require.Equal(t, "storage_unavailable", reply.Details["reason"], reply.Message)
			// A validation error is still answered as such during the
			// outage: it never reaches storage.
			_, err = s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "why", BatchSize: 1, ClientId: "c", RequestTimeout: "1h"})
			requireReason(t, err, styx.CodeBadRequest, styx.ReasonInvalidArgument)
			bringUp(s)

			servertest.Eventually(t, func() bool {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "why", RequestTimeout: "10s",
					Items: []*pb.QueueProduceItem{{Bytes: []byte("after")}}}) == nil
			}, "produce after the outage")
		})
	}
}
