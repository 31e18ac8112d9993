package service_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "github.com/duh-rpc/duh-go/proto/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// queratorMessages builds Querator's v1 message set from Styx's descriptor
// by dropping every Styx extension (fields numbered 100 and up, and the
// messages Querator does not have), in proto package "querator". The test
// speaks only through these, as Querator's Go client does.
func queratorMessages(t *testing.T) map[string]protoreflect.MessageDescriptor {
	fd := protodesc.ToFileDescriptorProto(pb.File_styx_v1_styx_proto)
	fd.Name = proto.String("querator/v1.proto")
	fd.Package = proto.String("querator")
	styxOnly := map[string]bool{"AttemptError": true, "DeadFilter": true, "DeadListRequest": true, "DeadListResponse": true,
		"DeadDeleteRequest": true, "DeadDeleteResponse": true, "DeadRedriveRequest": true, "RedrivesListRequest": true,
		"RedrivesListResponse": true, "RedriveTaskRequest": true, "RedriveCounts": true, "RedriveTask": true,
		"QueueRetryOutcome": true, "QueueRenewRequest": true, "QueueRenewResponse": true, "QueueRenewItem": true,
		"DeadGroupsRequest": true, "DeadGroup": true, "DeadGroupsResponse": true}
	var msgs []*descriptorpb.DescriptorProto
	for _, m := range fd.MessageType {
		if styxOnly[m.GetName()] {
			continue
		}
		var fields []*descriptorpb.FieldDescriptorProto
		for _, f := range m.Field {
			if f.GetNumber() < 100 {
				if f.GetTypeName() != "" && f.GetTypeName()[:len(".styx.v1.")] == ".styx.v1." {
					f.TypeName = proto.String(".querator." + f.GetTypeName()[len(".styx.v1."):])
				}
				fields = append(fields, f)
			}
		}
		m.Field = fields
		msgs = append(msgs, m)
	}
	fd.MessageType = msgs
	file, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	require.NoError(t, err)
	out := map[string]protoreflect.MessageDescriptor{}
	for i := range file.Messages().Len() {
		m := file.Messages().Get(i)
		out[string(m.Name())] = m
	}
	require.NotContains(t, out, "AttemptError")
	require.Nil(t, out["StorageItem"].Fields().ByNumber(100), "no Styx fields in Querator's StorageItem")
	return out
}

// TestQueratorCompatibility speaks exactly as Querator's Go client does:
// protobuf request bodies, no Accept header, replies decoded against
// Querator's message set.
func TestQueratorCompatibility(t *testing.T) {
	t.Parallel()
	msgs := queratorMessages(t)
	msgs["Reply"] = (&v1.Reply{}).ProtoReflect().Descriptor() // duh.v1.Reply, as Querator's client decodes errors and empty replies
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		endpoint := s.D.Endpoint()

		// msg builds a Querator message from protojson text.
		msg := func(name, js string) *dynamicpb.Message {
			m := dynamicpb.NewMessage(msgs[name])
			require.NoError(t, protojson.Unmarshal([]byte(js), m), js)
			return m
		}
		// call posts a Querator message as protobuf without Accept and
		// decodes the reply into a Querator message.
		call := func(path string, req proto.Message, reply string) *dynamicpb.Message {
			t.Helper()
			body, err := proto.Marshal(req)
			require.NoError(t, err)
			hr, err := http.NewRequest(http.MethodPost, endpoint+path, bytes.NewReader(body))
			require.NoError(t, err)
			hr.Header.Set("Content-Type", "application/protobuf")
			resp, err := http.DefaultClient.Do(hr)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, "application/protobuf", resp.Header.Get("Content-Type"), "reply in the request's encoding")
			require.Equal(t, 200, resp.StatusCode, "%s: %x", path, b)
			out := dynamicpb.NewMessage(msgs[reply])
			require.NoError(t, proto.UnmarshalOptions{DiscardUnknown: false}.Unmarshal(b, out), path)
			return out
		}
		field := func(m protoreflect.Message, name string) protoreflect.Value {
			fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
			require.NotNil(t, fd, name)
			return m.Get(fd)
		}
		const reply = "Reply"

		call("/v1/queues.create", msg("QueueInfo", `{"queue_name":"orders-dead"}`), reply)
		call("/v1/queues.create", msg("QueueInfo", `{"queue_name":"orders","dead_queue":"orders-dead","max_attempts":2,"lease_timeout":"1m","expire_timeout":"24h","requested_partitions":1}`), reply)
		info := call("/v1/queues.info", msg("QueuesInfoRequest", `{"queue_name":"orders"}`), "QueueInfo")
		assert.Equal(t, "orders-dead", field(info, "deadQueue").String())
		assert.Empty(t, info.GetUnknown())

		call("/v1/queue.produce", msg("QueueProduceRequest", `{"queue_name":"orders","request_timeout":"1m","items":[
			{"kind":"order","reference":"o-1","encoding":"application/json","bytes":"eyJpZCI6MX0="},
			{"kind":"order","reference":"o-2","utf8":"{\"id\":2}"}]}`), "QueueProduceResponse")

		lease := call("/v1/queue.lease", msg("QueueLeaseRequest", `{"queue_name":"orders","batch_size":2,"client_id":"querator-client","request_timeout":"5s"}`), "QueueLeaseResponse")
		assert.Empty(t, lease.GetUnknown())
		items := field(lease, "items").List()
		require.Equal(t, 2, items.Len())
		first, second := items.Get(0).Message(), items.Get(1).Message()
		assert.Equal(t, `{"id":1}`, string(field(first, "bytes").Bytes()))
		assert.Equal(t, int64(1), field(first, "attempts").Int())
		assert.Equal(t, "o-2", field(second, "reference").String())
		assert.Empty(t, first.GetUnknown())

		// Complete the first; retry the second until it is dead.
		call("/v1/queue.complete", msg("QueueCompleteRequest", `{"queue_name":"orders","partition":0,"request_timeout":"1m","ids":["`+field(first, "id").String()+`"]}`), "QueueCompleteResponse")
		retry := call("/v1/queue.retry", msg("QueueRetryRequest", `{"queue_name":"orders","partition":0,"items":[{"id":"`+field(second, "id").String()+`"}]}`), "QueueRetryResponse")
		assert.Equal(t, int64(200), field(retry, "code").Int())
		assert.Equal(t, "OK", field(retry, "codeText").String())
		assert.NotEmpty(t, retry.GetUnknown(), "the Styx outcomes arrive as unknown fields, which Querator ignores")
		again := call("/v1/queue.lease", msg("QueueLeaseRequest", `{"queue_name":"orders","batch_size":1,"client_id":"querator-client","request_timeout":"5s"}`), "QueueLeaseResponse")
		retried := field(again, "items").List().Get(0).Message()
		assert.Equal(t, int64(2), field(retried, "attempts").Int())
		call("/v1/queue.retry", msg("QueueRetryRequest", `{"queue_name":"orders","partition":0,"items":[{"id":"`+field(retried, "id").String()+`"}]}`), "QueueRetryResponse")

		// storage/items.list on the DLQ: the item carries dead-letter
		// metadata, which Querator's decoder skips as unknown fields.
		list := call("/v1/storage/items.list", msg("StorageItemsListRequest", `{"queue_name":"orders-dead","partition":0,"limit":10}`), "StorageItemsListResponse")
		dead := field(list, "items").List()
		require.Equal(t, 1, dead.Len())
		d := dead.Get(0).Message()
		assert.Equal(t, `{"id":2}`, string(field(d, "payload").Bytes()))
		assert.Equal(t, "o-2", field(d, "reference").String())
		assert.Equal(t, int64(2), field(d, "attempts").Int())
		assert.Equal(t, field(retried, "id").String(), field(d, "source_id").String())
		assert.NotEmpty(t, d.GetUnknown(), "the Styx dead-letter fields arrive as unknown fields, which Querator ignores")
		// The same list through Styx's own messages shows them.
		var styxList pb.StorageItemsListResponse
		raw, err := proto.Marshal(list)
		require.NoError(t, err)
		require.NoError(t, proto.Unmarshal(raw, &styxList))
		assert.Equal(t, "max_attempts", styxList.Items[0].DeadReason)
		assert.Equal(t, "orders", styxList.Items[0].SourceQueue)

		// A JSON request without Accept gets JSON, which parses strictly
		// against Querator's messages.
		js := `{"queue_name":"orders","batch_size":1,"client_id":"json-client","request_timeout":"20ms"}`
		call("/v1/queue.produce", msg("QueueProduceRequest", `{"queue_name":"orders","request_timeout":"1m","items":[{"utf8":"j"}]}`), "QueueProduceResponse")
		resp, err := http.Post(endpoint+"/v1/queue.lease", "application/json", bytes.NewReader([]byte(js)))
		require.NoError(t, err)
		jb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, string(jb))
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		strict := dynamicpb.NewMessage(msgs["QueueLeaseResponse"])
		require.NoError(t, protojson.UnmarshalOptions{DiscardUnknown: false}.Unmarshal(jb, strict), string(jb))
		// An empty long-poll answers 454 with Querator's message.
		resp, err = http.Post(endpoint+"/v1/queue.lease", "application/json", bytes.NewReader([]byte(js)))
		require.NoError(t, err)
		jb, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, 454, resp.StatusCode)
		assert.JSONEq(t, `{"code":454,"code_text":"Retry Request","message":"request timeout; no items are in the queue, try again","details":{"reason":"request_timeout"}}`, string(jb))
	})
}

// TestJSONReplies: a JSON reply is protojson with the proto field names:
// times are RFC 3339 in UTC (google.protobuf.Timestamp), and zero values
// are left out, so a lease from partition 0 has no "partition" key and an
// item that never died has no dead-letter fields (wire contract, "Framing").
func TestJSONReplies(t *testing.T) {
	rfc3339UTC := `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$`
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "js", LeaseTimeout: "1m", RequestedPartitions: 1})
		s.Produce("js", "x")
		post := func(path, body string) map[string]any {
			t.Helper()
			resp, err := http.Post(s.D.Endpoint()+path, "application/json", strings.NewReader(body))
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var out map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			return out
		}
		before := time.Now()
		lease := post("/v1/queue.lease", `{"queue_name":"js","batch_size":1,"client_id":"c","request_timeout":"5s"}`)
		assert.NotContains(t, lease, "partition", "partition 0 is a zero value")
		item := lease["items"].([]any)[0].(map[string]any)
		assert.NotContains(t, item, "encoding", "an empty string is a zero value")
		deadline, ok := item["lease_deadline"].(string)
		require.True(t, ok, "lease_deadline: %v", item)
		assert.Regexp(t, rfc3339UTC, deadline)
		at, err := time.Parse(time.RFC3339Nano, deadline)
		require.NoError(t, err)
		assert.WithinRange(t, at, before.Add(time.Minute-time.Second), time.Now().Add(time.Minute+time.Second))

		list := post("/v1/storage/items.list", `{"queue_name":"js"}`)
		stored := list["items"].([]any)[0].(map[string]any)
		for _, k := range []string{"created_at", "updated_at", "lease_deadline", "expire_deadline"} {
			assert.Regexp(t, rfc3339UTC, stored[k], k)
		}
		// Querator's time fields are always sent, an unset one as Go's zero
		// time (issue 25); Styx's extension fields are omitted when zero.
		for _, k := range []string{"enqueue_at", "dead_deadline"} {
			assert.Equal(t, "0001-01-01T00:00:00Z", stored[k], k)
		}
		assert.Equal(t, true, stored["is_leased"])
		for _, k := range []string{"dead_reason", "dead_at", "source_queue", "last_error", "errors", "redrive_count"} {
			assert.NotContains(t, stored, k, "an item that never died or failed has no %s", k)
		}
	})
}
