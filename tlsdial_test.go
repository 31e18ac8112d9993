package styx

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAlertConnWriteAfterAlert checks the order the http.Transport can
// meet against a server that requires a client certificate (TLS 1.3):
// the read gets the server's alert, the connection is closed, and the
// write of the request that follows fails with that alert, not with
// "use of closed network connection".
func TestAlertConnWriteAfterAlert(t *testing.T) {
	srv := httptest.NewUnstartedServer(nil)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake error is the point
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())

	conn, err := dialTLS(&tls.Config{RootCAs: roots, ServerName: "example.com"})(t.Context(), "tcp", srv.Listener.Addr().String())
	require.NoError(t, err, "TLS 1.3: the client's handshake ends before the server checks its certificate")
	_, err = conn.Read(make([]byte, 1))
	require.ErrorContains(t, err, "remote error: tls: certificate required")
	require.NoError(t, conn.Close())
	_, err = conn.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	require.ErrorContains(t, err, "remote error: tls: certificate required")
	require.NotErrorIs(t, err, net.ErrClosed)
}
