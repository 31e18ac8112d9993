package transport

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/styxq/styx/internal/apierr"
)

// Admission (issues 36 and 48): every request's body, and every response
// while it is written, is charged to one server-wide in-flight byte budget
// (Config.MaxInflightBytes), which bounds the memory requests can make the
// server hold. Within it, no one can hold more than a share:
//
//   - a holder, the API key a request authenticated with (or, without
//     --auth, the client's address), holds at most MaxInflightBytesPerKey,
//     so a key's slow or padded bodies, long polls and big answers cannot
//     lock every other key out;
//   - a request whose credentials are not verified yet (an SQS request
//     whose SigV4 signature covers its body: it is verified once the body
//     has arrived) is charged to its client's address instead, which holds
//     at most preAuthShare, and all such requests together at most a
//     quarter of the budget (preAuthTotal); its body must arrive within
//     PreAuthBodyReadTimeout. A forged signature costs its sender this
//     share, and the server nothing more.
//
// A charge the budget or a share cannot hold is refused at once with 503
// and Retry-After (nothing was done); a request never waits for budget. A
// request's charge is given back when it is answered; once its body is
// decoded it is lowered to what the decoded request holds (settle), so a
// long poll holds nearly nothing while it waits.

// DefaultMaxInflightBytes is the server-wide in-flight request byte budget
// (Config.MaxInflightBytes): 256 MiB, sized for a small machine. A request
// is charged RequestCost times its body (decoding copies it), so the
// default admits one 64 MiB body at a time, or hundreds of small ones.
const DefaultMaxInflightBytes = 256 << 20

// RequestCost is what a request's body costs the budget per byte: the body
// as read, the decoded copy of its payloads that the call holds until it is
// answered, and the store's batch of them. Measured with TestMemoryBudget
// (16 concurrent 48 MB produces on Pebble): charged twice its body, the
// process grew by 360-410 MiB under a 256 MiB budget; charged three times,
// by 155-170 MiB.
const RequestCost = 3

// DefaultPreAuthBodyReadTimeout bounds how long the body of a request whose
// credentials are verified only over its body (SQS's SigV4) may take to
// arrive: 10 seconds, against BodyReadTimeout's 30 for authenticated ones.
const DefaultPreAuthBodyReadTimeout = 10 * time.Second

// chunkCharge is how much of a body without a Content-Length is charged at
// a time, as it arrives.
const chunkCharge = 256 << 10

// DefaultMaxInflightBytesPerKey returns the share of the budget one key (or
// client address, without auth) may hold when Config.MaxInflightBytesPerKey
// is 0: a quarter of the budget, and never less than one request of the
// largest size (RequestCost × maxRequest).
func DefaultMaxInflightBytesPerKey(budget, maxRequest int64) int64 {
	return max(budget/4, RequestCost*maxRequest)
}

// overBudget is the 503 of a charge refused: the message says which limit
// refused it.
func overBudget(what string) error {
	return apierr.New(apierr.Overloaded, "server busy; the in-flight request budget is full, retry later (%s)", what)
}

var (
	errOverBudget = overBudget("the server holds at most --max-inflight-bytes of requests and answers at once")
	errOverShare  = overBudget("one key, or one client address without --auth, holds at most --max-inflight-bytes-per-key of it")
	errOverPre    = overBudget("requests not yet authenticated hold at most a small share of it per client address")
)

// isOverBudget reports whether err is one of the budget's refusals.
func isOverBudget(err error) bool {
	return err == errOverBudget || err == errOverShare || err == errOverPre
}

// budget is the server-wide in-flight byte budget and its shares. Safe for
// concurrent use; mu is a leaf lock.
type budget struct {
	size         int64 // the whole budget
	share        int64 // most one holder may hold
	preAuthShare int64 // most one client address may hold before its request is authenticated
	preAuthTotal int64 // most every not-yet-authenticated request may hold together

	mu      sync.Mutex
	used    int64            // held by every holder
	preUsed int64            // held by not-yet-authenticated requests
	held    map[string]int64 // by holder; pre-authentication ones under "pre " + address
}

// newBudget returns a budget of size bytes, share of it per holder, and
// preAuthShare per address before authentication (at most a quarter of
// size in all).
func newBudget(size, share, preAuthShare int64) *budget {
	return &budget{size: size, share: share, preAuthShare: preAuthShare,
		preAuthTotal: max(size/4, preAuthShare), held: map[string]int64{}}
}

// preAuthHolder is the holder of a request of addr not yet authenticated.
func preAuthHolder(addr string) string { return "pre " + addr }

// clientAddress is the address r came from, without its port: the holder
// of a request without a key.
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// charge adds n bytes to holder's charge, or refuses them (errOverBudget,
// errOverShare, errOverPre) and changes nothing. With force, the bytes are
// counted whatever the limits say (they are held already: an answer being
// written).
func (b *budget) charge(holder string, n int64, pre, force bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !force {
		switch {
		case b.used+n > b.size:
			return errOverBudget
		case pre && (b.held[holder]+n > b.preAuthShare || b.preUsed+n > b.preAuthTotal):
			return errOverPre
		case b.held[holder]+n > b.share:
			return errOverShare
		}
	}
	b.used += n
	b.held[holder] += n
	if pre {
		b.preUsed += n
	}
	return nil
}

// uncharge gives n bytes of holder's charge back.
func (b *budget) uncharge(holder string, n int64, pre bool) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if pre {
		b.preUsed -= n
	}
	if b.held[holder] -= n; b.held[holder] <= 0 {
		delete(b.held, holder)
	}
}

// inUse returns the bytes charged now, and how many holders hold them.
func (b *budget) inUse() (bytes int64, holders int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, len(b.held)
}

// admit charges r's body to holder (pre: a not-yet-authenticated request
// of an address): its Content-Length at once, or, for a body sent without
// one (chunked), chunkCharge at a time as it is read. It replaces r.Body
// with a reader that refuses more than limit bytes (apierr.Invalid) and a
// chunk the budget cannot hold (503), and returns the body, whose release
// is to be called once the request is answered. A body over limit by its
// Content-Length is refused before it is read.
func (b *budget) admit(r *http.Request, holder string, pre bool, limit int64) (*admittedBody, error) {
	if r.ContentLength > limit {
		return nil, bodyTooLarge(limit)
	}
	body := &admittedBody{ReadCloser: r.Body, b: b, holder: holder, pre: pre, limit: limit}
	if r.ContentLength > 0 {
		if err := b.charge(holder, RequestCost*r.ContentLength, pre, false); err != nil {
			return nil, err
		}
		body.charged = RequestCost * r.ContentLength
		body.prepaid = r.ContentLength
	}
	r.Body = body
	return body, nil
}

func bodyTooLarge(limit int64) error {
	return apierr.Invalidf("invalid request body; larger than the limit of %d bytes", limit)
}

// admittedBody is a request body charged to the budget. Read runs on the
// request's goroutine (and net/http's background read after the handler
// lifts the deadline, which reads nothing of an answered body); settle,
// authenticated and release take mu.
type admittedBody struct {
	io.ReadCloser
	b       *budget
	limit   int64
	read    int64 // bytes read so far
	prepaid int64 // bytes covered by the charge

	mu       sync.Mutex
	holder   string // who the charge is held by
	pre      bool   // charged as a not-yet-authenticated request
	charged  int64  // budget held, given back by release
	released bool
	err      error // sticky refusal
}

func (a *admittedBody) Read(p []byte) (int, error) {
	if a.err != nil {
		return 0, a.err
	}
	n, err := a.ReadCloser.Read(p)
	a.read += int64(n)
	if a.read > a.limit {
		a.err = bodyTooLarge(a.limit)
		return n, a.err
	}
	for a.read > a.prepaid {
		a.mu.Lock()
		cerr := a.b.charge(a.holder, RequestCost*chunkCharge, a.pre, false)
		if cerr == nil {
			a.charged += RequestCost * chunkCharge
		}
		a.mu.Unlock()
		if cerr != nil {
			a.err = cerr
			return n, a.err
		}
		a.prepaid += chunkCharge
	}
	return n, err
}

// settle lowers the charge to n bytes, once the body is decoded and what
// the request still holds is known (a long poll's decoded request is a few
// bytes); it never raises it.
func (a *admittedBody) settle(n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released || n >= a.charged {
		return
	}
	a.b.uncharge(a.holder, a.charged-n, a.pre)
	a.charged = n
	a.prepaid = max(a.read, 0) // a body read whole: nothing more arrives
}

// authenticated moves the charge of a request charged to its address
// before authentication to the key holder it authenticated as; over the
// key's share it is refused (503) and the charge stays the address's, given
// back by release.
func (a *admittedBody) authenticated(holder string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released || !a.pre {
		return nil
	}
	if err := a.b.charge(holder, a.charged, false, false); err != nil {
		return err
	}
	a.b.uncharge(a.holder, a.charged, true)
	a.holder, a.pre = holder, false
	return nil
}

// release gives the request's charge back to the budget; later calls do
// nothing.
func (a *admittedBody) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released {
		return
	}
	a.released = true
	a.b.uncharge(a.holder, a.charged, a.pre)
	a.charged = 0
}

// minChargedWrite is the smallest write of an answer counted against the
// budget (statusWriter.Write): smaller ones, most answers, cost less to
// write than to count.
const minChargedWrite = 64 << 10

// String describes the budget's limits, for the start-up log.
func (b *budget) String() string {
	return fmt.Sprintf("in-flight budget %d bytes, %d per key, %d per address before authentication (%d in all)",
		b.size, b.share, b.preAuthShare, b.preAuthTotal)
}
