package service_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/transport"
)

// Resource limits per request (issue 23). These tests measure the
// process's allocations, so they do not run in parallel with other tests;
// the bounds are loose (a few MiB against the hundreds the faults cost).

// allocated returns how many bytes fn allocated in the whole process.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// memoryBackend is the memory backend: these limits are HTTP-level, so one
// backend is enough.
func memoryBackend(t *testing.T) servertest.Backend { return servertest.Backends(t)[0] }

// TestBodyReadTimeout: a request that announces a 64 MiB body, sends 200
// bytes and stalls is answered 408 once the body read timeout passes, and
// its buffer grows with what arrived, not with what Content-Length claims.
func TestBodyReadTimeout(t *testing.T) {
	const conns = 4
	s := servertest.StartWith(t, memoryBackend(t), func(cfg *daemon.Config) {
		cfg.BodyReadTimeout = 300 * time.Millisecond
		// Room for every stalled body's charge: this test is about the
		// read timeout, TestMemoryBudget about the budget.
		cfg.MaxInflightBytes = conns * transport.RequestCost * 64 << 20
		cfg.MaxInflightBytesPerKey = cfg.MaxInflightBytes // one client address sends them all
	})
	alloc := allocated(func() {
		var cs []net.Conn
		for range conns {
			c, err := net.Dial("tcp", s.D.Addr())
			require.NoError(t, err)
			defer c.Close()
			_, err = io.WriteString(c, "POST /v1/queue.produce HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/protobuf\r\n"+
				"Content-Length: 67108864\r\n\r\n"+strings.Repeat("\x1a\x00", 100))
			require.NoError(t, err)
			cs = append(cs, c)
		}
		for _, c := range cs {
			// Generous: the server cuts the body off after 300ms.
			require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err, "the server cuts off a stalled body with an answer")
			body, _ := io.ReadAll(res.Body)
			require.Equal(t, http.StatusRequestTimeout, res.StatusCode, string(body))
			require.Contains(t, string(body), "the body did not arrive within the body read timeout of 300ms (200 of 67108864 bytes received)")
			_, err = c.Read(make([]byte, 1))
			require.ErrorIs(t, err, io.EOF, "the connection is closed after the 408")
		}
	})
	t.Logf("allocated %d MiB", alloc>>20)
	require.Less(t, alloc, uint64(12<<20), "%d connections announcing 64 MiB allocated %d MiB", conns, alloc>>20)

	t.Run("LongPollKeepsItsWait", func(t *testing.T) {
		// The deadline is lifted once the body is read: a lease waits its
		// request_timeout (3 × the body read timeout) and finds nothing,
		// instead of having its context canceled by the read deadline.
		s.CreateQueue(&pb.QueueInfo{QueueName: "idle", LeaseTimeout: "1m", ExpireTimeout: "1h"})
		_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "idle", BatchSize: 1, ClientId: "c", RequestTimeout: "900ms"})
		require.Equal(t, styx.CodeRetry, styx.ErrorCode(err), "%v", err)
		s.Produce("idle", "after the long poll")
		require.Len(t, s.Lease("idle", 1).Items, 1, "the connection still serves")
	})
}

// post sends body to path in content type ct and returns the status and
// the reply's message.
func post(t *testing.T, s *servertest.Server, path, ct string, body []byte) (int, string) {
	t.Helper()
	res, err := http.Post(s.D.Endpoint()+path, ct, bytes.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// TestListLimitsBeforeDecoding: a produce of a million empty items is
// refused 400, naming the field and the limit, without building a million
// messages (a naive decode allocates over 100 MiB for it).
func TestListLimitsBeforeDecoding(t *testing.T) {
	s := servertest.Start(t, memoryBackend(t))
	s.CreateQueue(&pb.QueueInfo{QueueName: "q", LeaseTimeout: "1m", ExpireTimeout: "1h"})
	const n = 1_000_000
	t.Run("Protobuf", func(t *testing.T) {
		body := append([]byte("\x0a\x01q"), bytes.Repeat([]byte{0x1a, 0x00}, n)...) // queue_name "q", n × items {}
		var code int
		var msg string
		alloc := allocated(func() { code, msg = post(t, s, "/v1/queue.produce", "application/protobuf", body) })
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, msg, "invalid items; 1000000 given, the limit is 1000")
		t.Logf("allocated %d MiB", alloc>>20)
		require.Less(t, alloc, uint64(16<<20), "a %d MiB body allocated %d MiB", len(body)>>20, alloc>>20)
	})
	t.Run("JSON", func(t *testing.T) {
		body := []byte(`{"queue_name":"q","items":[{}` + strings.Repeat(`,{}`, n-1) + `]}`)
		var code int
		var msg string
		alloc := allocated(func() { code, msg = post(t, s, "/v1/queue.produce", "application/json", body) })
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, msg, "invalid items; more than 1000 given, the limit is 1000")
		t.Logf("allocated %d MiB", alloc>>20)
		require.Less(t, alloc, uint64(16<<20), "a %d MiB body allocated %d MiB", len(body)>>20, alloc>>20)
	})
	t.Run("NestedIDs", func(t *testing.T) {
		body := []byte(`{"queue_name":"q","filter":{"ids":["1"` + strings.Repeat(`,"1"`, 1000) + `]}}`)
		code, msg := post(t, s, "/v1/dead.delete", "application/json", body)
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, msg, "invalid filter.ids; more than 1000 given, the limit is 1000")
	})
	t.Run("AtTheLimit", func(t *testing.T) {
		req := &pb.QueueProduceRequest{QueueName: "q", RequestTimeout: "1m"}
		for range 1000 {
			req.Items = append(req.Items, &pb.QueueProduceItem{Utf8: "x"})
		}
		require.NoError(t, s.C.QueueProduce(ctx, req))
	})
}

// TestMaxConnections: with one address's limit at 2 and two keep-alive
// connections of it idle, a third is served at once: the connection idle
// the longest (the first) is closed to make room (issue 48: idle
// connections must not keep new clients out; TestIdleConnectionsCannotLockOut
// has the busy case and the server-wide limit). The connections come from
// an address of their own (127.0.0.3), apart from the harness client's.
func TestMaxConnections(t *testing.T) {
	s := servertest.StartWith(t, memoryBackend(t), func(cfg *daemon.Config) { cfg.MaxConnections, cfg.MaxConnectionsPerAddress = 100, 2 })
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	health := func(c net.Conn, r *bufio.Reader) {
		_, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: styx\r\n\r\n")
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
		res, err := http.ReadResponse(r, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		_, _ = io.Copy(io.Discard, res.Body)
	}
	var conns []net.Conn
	var readers []*bufio.Reader
	for i := range 2 {
		c, err := dialer.DialContext(ctx, "tcp", s.D.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		conns, readers = append(conns, c), append(readers, bufio.NewReader(c))
		health(c, readers[i])
	}
	// The third is served: an idle one made room. (Were neither of the
	// first two noted idle yet, it would be refused 503: then it asks
	// again.)
	servertest.Eventually(t, func() bool {
		c, err := dialer.DialContext(ctx, "tcp", s.D.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, "GET /health HTTP/1.1\r\nHost: styx\r\n\r\n")
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		return res.StatusCode == http.StatusOK
	}, "a third connection is served")
	// One of the first two was closed to make room (before the third was
	// admitted): the first, unless the server had not yet marked it idle
	// when the third came (an answer can reach the client before the
	// server notes its connection idle). The other one still serves.
	served := 0
	for i := range 2 {
		if _, err := io.WriteString(conns[i], "GET /health HTTP/1.1\r\nHost: styx\r\n\r\n"); err != nil {
			continue
		}
		require.NoError(t, conns[i].SetReadDeadline(time.Now().Add(20*time.Second)))
		res, err := http.ReadResponse(readers[i], nil)
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "connection %d neither served nor closed", i)
		if err == nil {
			require.Equal(t, http.StatusOK, res.StatusCode)
			_, _ = io.Copy(io.Discard, res.Body)
			served++
		}
	}
	require.Equal(t, 1, served, "one of the first two connections was closed to make room, the other still serves")
}
