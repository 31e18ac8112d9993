package main

import (
	"io"
	"sync"
	"sync/atomic"
	"testing"
)

func TestClaim(t *testing.T) {
	unlimited := &bench{cfg: config{}}
	if n := unlimited.claim(100); n != 100 {
		t.Errorf("claim without --count = %d, want 100", n)
	}

	b := &bench{cfg: config{Count: 1050}}
	b.left.Store(b.cfg.Count)
	var total atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for {
				n := b.claim(100)
				if n == 0 {
					return
				}
				if i == 0 && n == 100 && total.Load() < 500 {
					b.unclaim(n) // a failed produce gives its items back
					continue
				}
				total.Add(int64(n))
			}
		})
	}
	wg.Wait()
	if total.Load() != 1050 || b.left.Load() != 0 {
		t.Errorf("claimed %d items, %d left; want 1050 and 0", total.Load(), b.left.Load())
	}
}

func TestClientsSpreadOverEndpoints(t *testing.T) {
	cfg := config{Endpoints: []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"}, Clients: 4}
	b, err := newBench(cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer b.c.Close()
	if len(b.clients) != 3 || b.c != b.clients[0] {
		t.Fatalf("%d clients, setup client first: %v", len(b.clients), b.c == b.clients[0])
	}
	for i := range 7 {
		if r := b.newRecorder(i); r.c != b.clients[i%3] {
			t.Errorf("recorder %d does not use endpoint %d", i, i%3)
		}
	}
}
