package transport

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/styxq/styx/styxpb"
)

// BenchmarkDecodeProduce measures what the pre-scan adds to decoding a
// produce of 100 items of 1 KiB, in both encodings: A/B in one run.
//
//	go test -run '^$' -bench DecodeProduce -benchmem ./transport/
func BenchmarkDecodeProduce(b *testing.B) {
	req := produce(0)
	payload := bytes.Repeat([]byte("p"), 1024)
	for range 100 {
		req.Items = append(req.Items, &pb.QueueProduceItem{Kind: "k", Reference: "r", Bytes: payload})
	}
	pbBody, _ := proto.Marshal(req)
	jsonBody, _ := protojson.Marshal(req)
	md := req.ProtoReflect().Descriptor()
	for _, c := range []struct {
		name   string
		body   []byte
		check  func([]byte, protoreflect.MessageDescriptor) error
		decode func([]byte, proto.Message) error
	}{
		{"protobuf", pbBody, checkListsProto, proto.Unmarshal},
		{"json", jsonBody, checkListsJSON, protojson.Unmarshal},
	} {
		b.Run(c.name+"/prescan-only", func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if err := c.check(c.body, md); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, scan := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/prescan=%v", c.name, scan), func(b *testing.B) {
				b.SetBytes(int64(len(c.body)))
				for b.Loop() {
					if scan {
						if err := c.check(c.body, md); err != nil {
							b.Fatal(err)
						}
					}
					if err := c.decode(c.body, &pb.QueueProduceRequest{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
