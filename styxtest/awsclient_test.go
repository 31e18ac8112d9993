package styxtest

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type captureTransport struct{ got *http.Request }

func (c *captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.got = req
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// writerToBody is a request body with WriteTo, as the AWS SDK's is.
type writerToBody struct{ *strings.Reader }

func (writerToBody) Close() error { return nil }

// TestAWSHTTPClientHidesWriteTo: the body the transport sends has no
// io.WriterTo, reads the same bytes, and the caller's request is not
// changed (a RoundTripper must not modify it).
func TestAWSHTTPClientHidesWriteTo(t *testing.T) {
	next := &captureTransport{}
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/", nil)
	require.NoError(t, err)
	body := writerToBody{strings.NewReader("payload")}
	req.Body = body
	_, err = plainBodies{next}.RoundTrip(req)
	require.NoError(t, err)
	_, hasWriteTo := next.got.Body.(io.WriterTo)
	require.False(t, hasWriteTo)
	b, err := io.ReadAll(next.got.Body)
	require.NoError(t, err)
	require.Equal(t, "payload", string(b))
	require.Equal(t, io.ReadCloser(body), req.Body, "the caller's request changed")
	require.NotNil(t, AWSHTTPClient().Transport)
}
