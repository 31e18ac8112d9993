package styx_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx"
)

// writeCert writes a self-signed certificate and its key as PEM files in
// dir, named name.pem and name.key, and returns their paths.
func writeCert(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile
}

// TestNewClientCertFileErrors checks that NewClient refuses a client
// certificate without its key (and the reverse) naming both fields, and a
// file that does not load naming the file.
func TestNewClientCertFileErrors(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir, "client")
	_, otherKey := writeCert(t, dir, "other")
	missing := filepath.Join(dir, "missing.pem")
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600))

	for _, tc := range []struct {
		name     string
		certFile string
		keyFile  string
		wantErr  []string
	}{
		{name: "CertWithoutKey", certFile: cert,
			wantErr: []string{"CertFile and KeyFile: set both or neither", cert}},
		{name: "KeyWithoutCert", keyFile: key,
			wantErr: []string{"CertFile and KeyFile: set both or neither", key}},
		{name: "CertFileMissing", certFile: missing, keyFile: key,
			wantErr: []string{"client certificate CertFile", missing, "no such file"}},
		{name: "KeyFileMissing", certFile: cert, keyFile: missing,
			wantErr: []string{"client certificate KeyFile", missing, "no such file"}},
		{name: "CertFileNotPEM", certFile: notPEM, keyFile: key,
			wantErr: []string{"CertFile " + notPEM, "failed to find any PEM data in certificate input"}},
		{name: "KeyFileNotPEM", certFile: cert, keyFile: notPEM,
			wantErr: []string{"KeyFile " + notPEM, "failed to find any PEM data in key input"}},
		{name: "KeyOfAnotherCert", certFile: cert, keyFile: otherKey,
			wantErr: []string{"CertFile " + cert + ", KeyFile " + otherKey, "private key does not match public key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := styx.NewClient(styx.ClientConfig{Endpoint: "https://127.0.0.1:1", CertFile: tc.certFile, KeyFile: tc.keyFile})
			require.Error(t, err)
			require.Nil(t, c)
			for _, want := range tc.wantErr {
				require.Contains(t, err.Error(), want)
			}
		})
	}

	t.Run("BothSet", func(t *testing.T) {
		c, err := styx.NewClient(styx.ClientConfig{Endpoint: "https://127.0.0.1:1", CertFile: cert, KeyFile: key})
		require.NoError(t, err)
		c.Close()
	})
}

// TestNewClientLeavesCallerTLS checks that CAFile and CertFile are added
// to copies: the caller's root pool and certificate slice (even one with
// spare capacity) are as they were, so one tls.Config can serve clients
// with different files.
func TestNewClientLeavesCallerTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir, "client")
	ca, _ := writeCert(t, dir, "ca")

	roots := x509.NewCertPool()
	before := roots.Clone()
	certs := make([]tls.Certificate, 0, 4)
	shared := &tls.Config{RootCAs: roots, Certificates: certs}

	c, err := styx.NewClient(styx.ClientConfig{Endpoint: "https://127.0.0.1:1", TLS: shared, CAFile: ca, CertFile: cert, KeyFile: key})
	require.NoError(t, err)
	defer c.Close()

	require.Same(t, roots, shared.RootCAs)
	require.True(t, roots.Equal(before), "the CA file was added to the caller's pool")
	require.Empty(t, shared.Certificates)
	require.Nil(t, certs[:1][0].Certificate, "the client certificate was written into the caller's backing array")
}
