package styxtest_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
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

// TestStartConfigure: Configure turns --auth on with a bootstrap admin key
// from a file, and Server.Client sends Options.APIKey; a client without a
// key is refused.
func TestStartConfigure(t *testing.T) {
	const admin = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	file := filepath.Join(t.TempDir(), "admin.key")
	if err := os.WriteFile(file, []byte(admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := styxtest.Start(t, styxtest.Options{APIKey: admin, Configure: func(cfg *daemon.Config) {
		cfg.Auth, cfg.AdminKeyFile = true, file
	}})
	styxtest.CreateQueue(t, s.Client, &pb.QueueInfo{QueueName: "q"})
	anon, err := styx.NewClient(styx.ClientConfig{Endpoint: s.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	_, err = anon.QueuesInfo(context.Background(), &pb.QueuesInfoRequest{QueueName: "q"})
	if styx.ErrorCode(err) != styx.CodeUnauthorized {
		t.Fatalf("queues.info without a key: %v, want 401", err)
	}
}
