package transport

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/styxq/styx/internal/apierr"
	pb "github.com/styxq/styx/styxpb"
)

// produce returns a produce request of n items with payloads.
func produce(n int) *pb.QueueProduceRequest {
	req := &pb.QueueProduceRequest{QueueName: "q", RequestTimeout: "1m"}
	for i := range n {
		req.Items = append(req.Items, &pb.QueueProduceItem{Kind: "k", Bytes: []byte(fmt.Sprint("payload ", i))})
	}
	return req
}

// importReq returns an import request of n items, the one at bad having
// errs attempt errors.
func importReq(n, bad, errs int) *pb.StorageItemsImportRequest {
	req := &pb.StorageItemsImportRequest{QueueName: "q"}
	for i := range n {
		it := &pb.StorageItem{Id: fmt.Sprint(i)}
		if i == bad {
			for range errs {
				it.Errors = append(it.Errors, &pb.AttemptError{Error: "e"})
			}
		}
		req.Items = append(req.Items, it)
	}
	return req
}

// checkLists runs the pre-scan of m's encoding, protobuf or JSON, and
// returns its message ("" when it passes).
func checkLists(t *testing.T, m proto.Message, json bool) string {
	t.Helper()
	var err error
	if json {
		b, merr := protojson.Marshal(m)
		require.NoError(t, merr)
		err = checkListsJSON(b, m.ProtoReflect().Descriptor())
	} else {
		b, merr := proto.Marshal(m)
		require.NoError(t, merr)
		err = checkListsProto(b, m.ProtoReflect().Descriptor())
	}
	if err == nil {
		return ""
	}
	e, ok := apierr.As(err)
	require.True(t, ok, err.Error())
	require.Equal(t, apierr.Invalid, e.Code)
	return e.Message
}

func TestCheckLists(t *testing.T) {
	for _, json := range []bool{false, true} {
		more := func(n string) string { // what each encoding says of the count
			if json {
				return "more than 1000"
			}
			return n
		}
		t.Run(fmt.Sprint("json=", json), func(t *testing.T) {
			t.Run("AtTheLimit", func(t *testing.T) {
				require.Empty(t, checkLists(t, produce(1000), json))
				require.Empty(t, checkLists(t, importReq(1000, 999, 10), json))
				require.Empty(t, checkLists(t, &pb.QueueCompleteRequest{QueueName: "q", Ids: make([]string, 1000)}, json))
			})
			t.Run("Items", func(t *testing.T) {
				require.Equal(t, "invalid items; "+more("1001")+" given, the limit is 1000", checkLists(t, produce(1001), json))
			})
			t.Run("Ids", func(t *testing.T) {
				require.Equal(t, "invalid ids; "+more("2000")+" given, the limit is 1000",
					checkLists(t, &pb.QueueCompleteRequest{QueueName: "q", Ids: make([]string, 2000)}, json))
			})
			t.Run("NestedMessage", func(t *testing.T) {
				req := &pb.DeadDeleteRequest{QueueName: "q", Filter: &pb.DeadFilter{Ids: make([]string, 1001)}}
				require.Equal(t, "invalid filter.ids; "+more("1001")+" given, the limit is 1000", checkLists(t, req, json))
			})
			t.Run("NestedList", func(t *testing.T) {
				n := "11"
				if json {
					n = "more than 10"
				}
				require.Equal(t, "invalid items[7].errors; "+n+" given, the limit is 10", checkLists(t, importReq(20, 7, 11), json))
			})
		})
	}
	t.Run("Malformed", func(t *testing.T) {
		md := (&pb.QueueProduceRequest{}).ProtoReflect().Descriptor()
		for _, b := range []string{"", "\xff", "\x1a\x05ab", "\x1a\x80"} {
			require.NoError(t, checkListsProto([]byte(b), md), "%q", b)
		}
		for _, b := range []string{"", "[]", "null", `{"items":`, `{"items":{}}`, `{"items":[1,{"x":[[[`, `{"queue_name":[{}]}`, `{"items":[}`} {
			require.NoError(t, checkListsJSON([]byte(b), md), "%q", b)
		}
	})
	t.Run("JSONStringsAndEscapes", func(t *testing.T) {
		md := (&pb.QueueProduceRequest{}).ProtoReflect().Descriptor()
		items := strings.Repeat(`{"utf8":"a\\\"}]"},`, 1000) // a string holding \"}]
		body := `{"queue_name":"q\"\\","it\u0065ms":[` + items + `{}]}`
		require.ErrorContains(t, checkListsJSON([]byte(body), md), "invalid items; more than 1000 given")
		body = `{"queue_name":"\",\"items\":[{},{}","items":[` + strings.TrimSuffix(items, ",") + `]}`
		require.NoError(t, checkListsJSON([]byte(body), md))
		var m pb.QueueProduceRequest
		require.NoError(t, protojson.Unmarshal([]byte(body), &m), "the body is valid")
		require.Len(t, m.Items, 1000)
		require.Equal(t, `a\"}]`, m.Items[0].Utf8)
	})
	t.Run("JSONProtoNames", func(t *testing.T) {
		md := (&pb.QueueLeaseResponse{}).ProtoReflect().Descriptor() // items of QueueLeaseItem
		body := `{"items":[` + strings.Repeat(`{"leaseDeadline":"x","lease_deadline":{}},`, 1000) + `{}]}`
		require.ErrorContains(t, checkListsJSON([]byte(body), md), "invalid items; more than 1000 given")
	})
}

// FuzzCheckLists checks the pre-scan against decoding: a body the decoder
// accepts is refused by the scan exactly when it holds a list over its
// limit; the scan never panics.
func FuzzCheckLists(f *testing.F) {
	for _, m := range []proto.Message{produce(3), importReq(3, 1, 2), &pb.DeadDeleteRequest{QueueName: "q", Filter: &pb.DeadFilter{Ids: []string{"a"}}}} {
		b, _ := proto.Marshal(m)
		f.Add(b, false)
		j, _ := protojson.Marshal(m)
		f.Add(j, true)
	}
	f.Add([]byte(`{"items":[{},{"errors":[{},{},{},{},{},{},{},{},{},{},{}]}]}`), true)
	f.Add(bytes.Repeat([]byte{0x1a, 0}, 1001), false)
	f.Fuzz(func(t *testing.T, body []byte, json bool) {
		for _, m := range []proto.Message{&pb.QueueProduceRequest{}, &pb.StorageItemsImportRequest{}, &pb.DeadDeleteRequest{}} {
			md := m.ProtoReflect().Descriptor()
			var scan, dec error
			if json {
				scan = checkListsJSON(body, md)
				dec = protojson.Unmarshal(body, m)
			} else {
				scan = checkListsProto(body, md)
				dec = proto.Unmarshal(body, m)
			}
			if dec != nil {
				continue
			}
			if over := overLimit(m.ProtoReflect()); over != (scan != nil) {
				t.Fatalf("%s %q: decoded has a list over its limit: %v; the scan says %v", md.FullName(), body, over, scan)
			}
		}
	})
}

// overLimit reports whether m holds a list over its limit.
func overLimit(m protoreflect.Message) bool {
	over := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			if l.Len() > listLimit(fd) {
				over = true
			}
			for i := 0; i < l.Len() && !over && fd.Message() != nil; i++ {
				over = overLimit(l.Get(i).Message())
			}
		case fd.IsMap():
			over = v.Map().Len() > listLimit(fd)
		case fd.Message() != nil:
			over = overLimit(v.Message())
		}
		return !over
	})
	return over
}

// TestCheckListsMerged: a singular message given twice is decoded as one,
// its lists joined; the scan counts them joined too.
func TestCheckListsMerged(t *testing.T) {
	half, err := proto.Marshal(&pb.DeadDeleteRequest{Filter: &pb.DeadFilter{Ids: make([]string, 600)}})
	require.NoError(t, err)
	body := append(append([]byte{}, half...), half...)
	var m pb.DeadDeleteRequest
	require.NoError(t, proto.Unmarshal(body, &m))
	require.Len(t, m.Filter.Ids, 1200)
	before := bytes.Clone(body)
	require.EqualError(t, checkListsProto(body, m.ProtoReflect().Descriptor()), "invalid filter.ids; 1200 given, the limit is 1000")
	require.Equal(t, before, body, "the scan leaves the body as it was")
}
