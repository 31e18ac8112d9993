package styxtest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

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

// A test of a worker on an ordered queue: each customer's orders are
// handled one at a time, in the order they were produced.
func ExampleGrouped() {
	testOrders := func(t *testing.T) {
		c := styxtest.NewServer(t)
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "orders", Ordered: true})
		styxtest.Produce(t, c, "orders", append(
			styxtest.Grouped("customer-1", `{"order":1}`, `{"order":2}`),
			styxtest.Grouped("customer-2", `{"order":3}`)...)...)
		// Run the worker under test on "orders" and assert what it did.
	}
	_ = testOrders // in a _test.go file: func TestOrders(t *testing.T) { ... }
}

// recordProduces is an http.RoundTripper that keeps the produce requests
// it sends.
type recordProduces struct {
	mu   sync.Mutex
	reqs []*pb.QueueProduceRequest
}

func (r *recordProduces) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/queue.produce") {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		var pr pb.QueueProduceRequest
		if err := proto.Unmarshal(body, &pr); err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, &pr)
		r.mu.Unlock()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestProduceGrouped: Produce sends 1,500 items of Grouped in order, in
// requests of 1,000 and 500, each item with its group, and the queue holds
// them in that order, each with its group.
func TestProduceGrouped(t *testing.T) {
	s := styxtest.Start(t, styxtest.Options{})
	rec := &recordProduces{}
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: s.Endpoint, HTTPClient: &http.Client{Transport: rec}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "orders", Ordered: true})
	var want []string
	var items []*pb.QueueProduceItem
	for g := range 3 {
		var payloads []string
		for i := range 500 {
			payloads = append(payloads, fmt.Sprintf("g%d/%d", g, i))
		}
		want = append(want, payloads...)
		items = append(items, styxtest.Grouped(fmt.Sprintf("g%d", g), payloads...)...)
	}
	styxtest.Produce(t, c, "orders", items...)

	rec.mu.Lock()
	var sizes []int
	var sent []string
	for _, r := range rec.reqs {
		sizes = append(sizes, len(r.Items))
		for _, it := range r.Items {
			if g, _, _ := strings.Cut(string(it.Bytes), "/"); it.Group != g {
				t.Errorf("item %s sent with group %q", it.Bytes, it.Group)
			}
			sent = append(sent, string(it.Bytes))
		}
	}
	rec.mu.Unlock()
	if !slices.Equal(sizes, []int{1000, 500}) {
		t.Errorf("requests of %v items, want [1000 500]", sizes)
	}
	if !slices.Equal(sent, want) {
		t.Errorf("items sent out of order")
	}
	var stored []string
	pivot := ""
	for {
		res, err := c.StorageItemsList(context.Background(), &pb.StorageItemsListRequest{QueueName: "orders", Pivot: pivot, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range res.Items {
			if it.Id == pivot {
				continue
			}
			stored = append(stored, string(it.Payload))
			if g, _, _ := strings.Cut(string(it.Payload), "/"); it.Group != g {
				t.Errorf("item %s stored with group %q", it.Payload, it.Group)
			}
		}
		if len(res.Items) < 1000 {
			break
		}
		pivot = res.Items[len(res.Items)-1].Id
	}
	if !slices.Equal(stored, want) {
		t.Errorf("the queue holds %d items, not the %d produced in order", len(stored), len(want))
	}
}
