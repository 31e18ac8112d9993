package styxtest_test

import (
	"context"
	"testing"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// A test of producer code against a real in-process server: the server
// runs on memory storage on a free loopback port and stops when the test
// ends.
func ExampleNewServer() {
	testProducer := func(t *testing.T) {
		c := styxtest.NewServer(t)
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "emails"})
		// The code under test would produce here.
		err := c.QueueProduce(context.Background(), &pb.QueueProduceRequest{QueueName: "emails",
			Items: []*pb.QueueProduceItem{{Utf8: "welcome, ada"}}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.StorageItemsList(context.Background(), &pb.StorageItemsListRequest{QueueName: "emails"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Items) != 1 || string(res.Items[0].Payload) != "welcome, ada" {
			t.Errorf("queue holds %v", res.Items)
		}
	}
	_ = testProducer // in a _test.go file: func TestProducer(t *testing.T) { ... }
}

func TestNewServer(t *testing.T) {
	c := styxtest.NewServer(t)
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "q"})
	info, err := c.QueuesInfo(context.Background(), &pb.QueuesInfoRequest{QueueName: "q"})
	if err != nil || info.QueueName != "q" {
		t.Fatalf("queues.info: %v, %v", info, err)
	}
}
