package styx

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// dialTLS returns an http.Transport DialTLSContext that dials addr over
// TCP, runs the TLS handshake with a clone of tc (nil: the defaults; an
// empty ServerName is set to addr's host, as the Transport does) and
// returns the connection as an *alertConn.
//
// Why: in TLS 1.3 the client's handshake ends before the server has
// checked the client's certificate, so a server that requires one (styx
// server --tls-client-ca) refuses it with an alert after the request was
// sent. The Transport reads that alert, closes the connection and, when
// its write of the request loses the race, reports the write's "use of
// closed network connection" instead of the alert that says why. The
// alertConn answers that write with the alert.
func dialTLS(tc *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := &tls.Config{}
		if tc != nil {
			cfg = tc.Clone()
		}
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			cfg.ServerName = host
		}
		conn := tls.Client(raw, cfg)
		if err := conn.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		return &alertConn{Conn: conn}, nil
	}
}

// alertConn is a TLS connection that keeps the first alert the server
// sent (a read's "remote error: tls: …") and returns it in place of the
// error of any later failed write, so the alert reaches the caller
// whichever of the Transport's read and write loops fails first.
type alertConn struct {
	*tls.Conn
	mu    sync.Mutex
	alert error
}

// Read reads from the connection, keeping the first remote alert.
func (c *alertConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	var oe *net.OpError
	if err != nil && errors.As(err, &oe) && oe.Op == "remote error" {
		c.mu.Lock()
		if c.alert == nil {
			c.alert = err
		}
		c.mu.Unlock()
	}
	return n, err
}

// Write writes to the connection; when it fails after the server sent
// an alert, the error is that alert.
func (c *alertConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.mu.Lock()
		if c.alert != nil {
			err = c.alert
		}
		c.mu.Unlock()
	}
	return n, err
}
