package styxtest

import (
	"io"
	"net/http"
)

// AWSHTTPClient returns an HTTP client for the AWS SDK for Go v2 pointed
// at a test server (awssqs.Options.HTTPClient). It differs from the SDK's
// default only in the request bodies it sends: it hides their io.WriterTo.
//
// Why: the SDK (smithy-go v1.28) wraps a request body in a reader whose
// WriteTo answers io.EOF once the SDK has closed it, and it closes it as
// soon as the response's headers arrive. net/http copies the body to the
// socket and then reads it once more to check its length. Against a server
// that answers faster than that second read (a test server on loopback
// does, about once in a thousand requests), the read meets the closed body,
// net/http takes the io.EOF for a write error and closes the connection
// while the response's body is still being read: the call fails with
// "deserialization failed ... use of closed network connection" although
// the server answered 200. A body without WriteTo is read through Read,
// which answers a plain end of body, and the race is gone.
func AWSHTTPClient() *http.Client {
	return &http.Client{Transport: plainBodies{http.DefaultTransport.(*http.Transport).Clone()}}
}

// plainBodies is a RoundTripper that sends each request's body through
// Read only (AWSHTTPClient).
type plainBodies struct{ next http.RoundTripper }

// RoundTrip sends req with its body wrapped in a plain io.ReadCloser.
func (p plainBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		req = req.Clone(req.Context())
		req.Body = struct{ io.ReadCloser }{req.Body}
	}
	return p.next.RoundTrip(req)
}
