package transport

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Connection admission (issue 48): open connections are bounded in all
// (MaxConnections) and per client address (MaxConnectionsPerAddress, as
// nginx's limit_conn), and no idle connection can keep a new client out:
// when a bound is reached, the connection idle the longest (a keep-alive
// connection between requests, or one that has sent nothing for
// newConnGrace since it was accepted) is closed to make room, the client's
// own first when its address is at its bound. Only when every connection
// in the way is busy with a request is a new one refused: answered 503
// with Retry-After and closed at once (over TLS, closed), never left
// waiting in the kernel's backlog, so that /health and new clients get an
// answer.

// DefaultMaxConnectionsPerAddress returns the most connections one client
// address may hold when Config.MaxConnectionsPerAddress is 0: a quarter of
// maxConnections, at least 1. Behind a proxy or a load balancer, every
// client has its address: raise it there.
func DefaultMaxConnectionsPerAddress(maxConnections int) int {
	return max(1, maxConnections/4)
}

// newConnGrace is how long a connection may stay without sending its first
// request before it is as idle as a keep-alive one.
const newConnGrace = 2 * time.Second

// ConnLimiter bounds a listener's connections (Listen) and learns which are
// idle from the HTTP server (ConnState, to be set as http.Server.ConnState).
// Safe for concurrent use; mu is a leaf lock.
type ConnLimiter struct {
	max, perAddress int
	plain           bool // the listener serves plain HTTP (not TLS): a refusal can be answered 503
	onRefuse        func()

	mu     sync.Mutex
	open   int
	byAddr map[string]int
	// idle holds the connections that may be closed to make room, with
	// when they became idle (or were accepted, for a new one).
	idle map[*limitedConn]idleSince
}

type idleSince struct {
	at      time.Time
	new     bool // accepted, no request yet: idle once newConnGrace has passed
	address string
}

// NewConnLimiter returns a limiter of max connections in all and
// perAddress per client address. plain says the listener serves HTTP
// without TLS (a refused connection is then answered 503 before it is
// closed). onRefuse, when set, is called for every refused connection.
func NewConnLimiter(max, perAddress int, plain bool, onRefuse func()) *ConnLimiter {
	return &ConnLimiter{max: max, perAddress: perAddress, plain: plain, onRefuse: onRefuse,
		byAddr: map[string]int{}, idle: map[*limitedConn]idleSince{}}
}

// Listen returns l bounded by the limiter.
func (c *ConnLimiter) Listen(l net.Listener) net.Listener { return &limitedListener{Listener: l, c: c} }

// Open returns the connections open now.
func (c *ConnLimiter) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

// ConnState records which connections are idle; set it as the HTTP
// server's ConnState (a TLS connection is matched by the one under it).
func (c *ConnLimiter) ConnState(conn net.Conn, s http.ConnState) {
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = nc.NetConn()
	}
	lc, ok := conn.(*limitedConn)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if lc.closed {
		return
	}
	switch s {
	case http.StateIdle:
		c.idle[lc] = idleSince{at: time.Now(), address: lc.address}
	case http.StateNew:
		c.idle[lc] = idleSince{at: time.Now(), new: true, address: lc.address}
	default:
		delete(c.idle, lc)
	}
}

type limitedListener struct {
	net.Listener
	c *ConnLimiter
}

// Accept returns the next connection there is room for, making room by
// closing idle ones; it refuses the others (503, closed) and goes on.
func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.c.admit(conn); lc != nil {
			return lc, nil
		}
		if l.c.onRefuse != nil {
			l.c.onRefuse()
		}
		go l.c.refuse(conn)
	}
}

// admit counts conn in, closing idle connections to make room; nil when
// there is none.
func (c *ConnLimiter) admit(conn net.Conn) *limitedConn {
	address := conn.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(address); err == nil {
		address = host
	}
	for {
		c.mu.Lock()
		var victim *limitedConn
		switch {
		case c.byAddr[address] >= c.perAddress:
			victim = c.oldestIdle(address)
		case c.open >= c.max:
			victim = c.oldestIdle("")
		default:
			c.open++
			c.byAddr[address]++
			c.mu.Unlock()
			return &limitedConn{Conn: conn, c: c, address: address}
		}
		if victim == nil {
			c.mu.Unlock()
			return nil
		}
		delete(c.idle, victim)
		c.mu.Unlock()
		_ = victim.Close() // gives its place back
	}
}

// oldestIdle returns the connection idle the longest (of address, unless
// it is ""), or nil. Called with mu held.
func (c *ConnLimiter) oldestIdle(address string) *limitedConn {
	var oldest *limitedConn
	var at time.Time
	now := time.Now()
	for lc, s := range c.idle {
		if address != "" && s.address != address || s.new && now.Sub(s.at) < newConnGrace {
			continue
		}
		if oldest == nil || s.at.Before(at) {
			oldest, at = lc, s.at
		}
	}
	return oldest
}

// refuse answers a connection there is no room for and closes it.
func (c *ConnLimiter) refuse(conn net.Conn) {
	defer conn.Close()
	if !c.plain {
		return
	}
	body := overloadedReplyJSON + "\n"
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	// HTTP clients take an answer only to a request they sent: wait for
	// its head (a little of it, within the deadline), then answer.
	head := make([]byte, 0, 4096)
	for len(head) < cap(head) && !bytes.Contains(head, []byte("\r\n\r\n")) {
		n, err := conn.Read(head[len(head):cap(head)])
		head = head[:len(head)+n]
		if err != nil {
			break
		}
	}
	_, _ = conn.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n" +
		"Connection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	// Closing with the request unread would reset the connection, and the
	// client could lose the answer: end the writing half, then drain
	// what the client sent until it closes (or the deadline).
	if tc, ok := conn.(interface{ CloseWrite() error }); ok && tc.CloseWrite() == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(conn, 1<<20))
	}
}

// limitedConn is a connection counted by its limiter until it is closed.
type limitedConn struct {
	net.Conn
	c       *ConnLimiter
	address string
	once    sync.Once
	closed  bool // guarded by c.mu
}

func (lc *limitedConn) Close() error {
	err := lc.Conn.Close()
	lc.once.Do(func() {
		c := lc.c
		c.mu.Lock()
		defer c.mu.Unlock()
		lc.closed = true
		delete(c.idle, lc)
		c.open--
		if c.byAddr[lc.address]--; c.byAddr[lc.address] <= 0 {
			delete(c.byAddr, lc.address)
		}
	})
	return err
}
