package transport

import (
	"io"
	"net/http"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/styxq/styx/internal/apierr"
)

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

// chunkCharge is how much of a body without a Content-Length is charged at
// a time, as it arrives.
const chunkCharge = 256 << 10

// errOverBudget answers a request the in-flight byte budget cannot admit
// now (503 with Retry-After; nothing was done).
var errOverBudget = apierr.New(apierr.Overloaded, "server busy; the in-flight request budget is full, retry later "+
	"(the server holds at most --max-inflight-bytes of request bodies at once)")

// budget is the server-wide in-flight request byte budget. Safe for
// concurrent use.
type budget struct {
	sem  *semaphore.Weighted
	size int64
}

func newBudget(size int64) *budget {
	return &budget{sem: semaphore.NewWeighted(size), size: size}
}

// admit charges r's body to the budget: its Content-Length at once, or, for
// a body sent without one (chunked), chunkCharge at a time as it is read.
// It replaces r.Body with a reader that refuses more than limit bytes
// (apierr.Invalid) and a chunk the budget cannot hold (errOverBudget), and
// returns the release to call once the request is answered. A body over
// limit by its Content-Length is refused before it is read.
func (b *budget) admit(r *http.Request, limit int64) (release func(), err error) {
	if r.ContentLength > limit {
		return nil, bodyTooLarge(limit)
	}
	body := &admittedBody{ReadCloser: r.Body, b: b, limit: limit}
	if r.ContentLength > 0 {
		if !b.sem.TryAcquire(RequestCost * r.ContentLength) {
			return nil, errOverBudget
		}
		body.charged = RequestCost * r.ContentLength
		body.prepaid = r.ContentLength
	}
	r.Body = body
	return body.release, nil
}

func bodyTooLarge(limit int64) error {
	return apierr.Invalidf("invalid request body; larger than the limit of %d bytes", limit)
}

// admittedBody is a request body charged to the budget.
type admittedBody struct {
	io.ReadCloser
	b       *budget
	limit   int64
	read    int64 // bytes read so far
	prepaid int64 // bytes covered by the Content-Length charge
	charged int64 // budget held, released once by release
	once    sync.Once
	err     error // sticky refusal
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
		if !a.b.sem.TryAcquire(RequestCost * chunkCharge) {
			a.err = errOverBudget
			return n, a.err
		}
		a.charged += RequestCost * chunkCharge
		a.prepaid += chunkCharge
	}
	return n, err
}

// release gives the request's charge back to the budget; later calls do
// nothing.
func (a *admittedBody) release() {
	a.once.Do(func() {
		if a.charged > 0 {
			a.b.sem.Release(a.charged)
		}
	})
}
