package service_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pgProxy is a TCP proxy between Styx and PostgreSQL that can cut a
// connection at a transaction's COMMIT: it reads the frontend protocol
// (simple Query, Parse and Bind messages) to know which statements each
// connection's transaction ran, and when one that ran a statement
// containing the armed text sends COMMIT (a simple query, or a bound
// statement of a pipelined batch, which is then forwarded to its Sync), it
// either forwards the COMMIT and drops the connection once the server has
// answered, without relaying the
// answer (the commit happened; Styx cannot know), or drops the connection
// without forwarding it (the commit never happened; Styx cannot know
// either).
type pgProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu       sync.Mutex
	armed    string // statement text that selects the victim transaction; "" when disarmed
	forward  bool   // forward the victim's COMMIT before cutting
	cut      chan string
	sessions []net.Conn
}

// startPGProxy listens on a free local port and relays to target
// (host:port); it stops with the test.
func startPGProxy(t *testing.T, target string) *pgProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &pgProxy{t: t, ln: ln, target: target}
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.sessions {
			_ = c.Close()
		}
	})
	return p
}

// proxyURL returns the PostgreSQL URL u with its host:port replaced by p's.
func (p *pgProxy) url(u string) string {
	parsed, err := url.Parse(u)
	require.NoError(p.t, err)
	parsed.Host = p.ln.Addr().String()
	return parsed.String()
}

// pgHost returns the host:port of the PostgreSQL URL u.
func pgHost(t *testing.T, u string) string {
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	return parsed.Host
}

// arm makes the next COMMIT of a transaction that ran a statement
// containing text the victim (forwarded or not, as forward says), and
// returns a channel that receives the server's answer to it: "COMMIT" or
// "ROLLBACK" when it was forwarded, "" when it was not.
func (p *pgProxy) arm(text string, forward bool) <-chan string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.forward, p.cut = text, forward, make(chan string, 1)
	return p.cut
}

func (p *pgProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.sessions = append(p.sessions, c, s)
		p.mu.Unlock()
		go p.session(c, s)
	}
}

// session relays one connection: the client's messages are parsed and
// written whole; the server's bytes are copied as they come, until the
// victim's COMMIT is forwarded, after which the server's answer is read,
// reported and never relayed.
func (p *pgProxy) session(c, s net.Conn) {
	defer c.Close()
	defer s.Close()
	victim, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close()
		defer s.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			select {
			case <-victim:
				// The answer to the batch that ends with the COMMIT, up to
				// its ReadyForQuery: the COMMIT's is its last tag.
				answer := append([]byte(nil), buf[:n]...)
				for err == nil && !hasMessage(answer, 'Z') {
					n, err = s.Read(buf)
					answer = append(answer, buf[:n]...)
				}
				p.report(lastCommandTag(answer))
				return
			default:
			}
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()

	// The startup message has no type byte.
	var head [4]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return
	}
	startup := make([]byte, binary.BigEndian.Uint32(head[:]))
	copy(startup, head[:])
	if _, err := io.ReadFull(c, startup[4:]); err != nil {
		return
	}
	if _, err := s.Write(startup); err != nil {
		return
	}
	prepared := map[string]string{} // statement name -> its text
	var ran []string                // statements of the transaction in progress
	for {
		var h [5]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		msg := make([]byte, 1+binary.BigEndian.Uint32(h[1:]))
		copy(msg, h[:])
		if _, err := io.ReadFull(c, msg[5:]); err != nil {
			return
		}
		body := msg[5:]
		var text string // the statement msg runs, if any
		switch h[0] {
		case 'Q':
			text = cstring(body)
		case 'P':
			name := cstring(body)
			prepared[name] = cstring(body[len(name)+1:])
		case 'B':
			portal := cstring(body)
			text = prepared[cstring(body[len(portal)+1:])]
		}
		if text != "" {
			q := strings.ToLower(strings.TrimSpace(text))
			switch {
			case q == "begin" || strings.HasPrefix(q, "begin "):
				ran = ran[:0]
			case q == "commit":
				if forward, ok := p.victim(ran); ok {
					if !forward {
						p.report("")
						return
					}
					close(victim)
					if _, err := s.Write(msg); err != nil {
						return
					}
					// The rest of an extended-protocol batch, to its Sync.
					for h[0] != 'Q' && h[0] != 'S' {
						if _, err := io.ReadFull(c, h[:]); err != nil {
							break
						}
						msg = make([]byte, 1+binary.BigEndian.Uint32(h[1:]))
						copy(msg, h[:])
						if _, err := io.ReadFull(c, msg[5:]); err != nil {
							break
						}
						if _, err := s.Write(msg); err != nil {
							break
						}
					}
					<-done // the reader reports the answer and closes both
					return
				}
				ran = ran[:0]
			default:
				ran = append(ran, text)
			}
		}
		if _, err := s.Write(msg); err != nil {
			return
		}
	}
}

// victim reports whether a transaction that ran stmts is the armed victim
// (and disarms), and whether its COMMIT is to be forwarded.
func (p *pgProxy) victim(stmts []string) (forward, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed == "" {
		return false, false
	}
	for _, s := range stmts {
		if strings.Contains(s, p.armed) {
			p.armed = ""
			return p.forward, true
		}
	}
	return false, false
}

func (p *pgProxy) report(tag string) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	cut <- tag
}

// lastCommandTag returns the tag of the last CommandComplete message in b
// ("COMMIT", "ROLLBACK"), or "" when there is none.
func lastCommandTag(b []byte) string {
	tag := ""
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 1+n {
			break
		}
		if b[0] == 'C' {
			tag = cstring(b[5 : 1+n])
		}
		b = b[1+n:]
	}
	return tag
}

// hasMessage reports whether b holds a whole message of type typ.
func hasMessage(b []byte, typ byte) bool {
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 1+n {
			return false
		}
		if b[0] == typ {
			return true
		}
		b = b[1+n:]
	}
	return false
}

// cstring returns the NUL-terminated string at the start of b.
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}
