package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// cliPKI is a CA made for one test and PEM files it signed: a server
// certificate for 127.0.0.1 and a client certificate.
type cliPKI struct {
	caFile                    string
	serverCert, serverKey     string
	clientCert, clientKey     string
	strangerCert, strangerKey string // a client certificate of another CA
}

func newCLIPKI(t *testing.T) cliPKI {
	t.Helper()
	dir := t.TempDir()
	serial := int64(0)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600))
		return p
	}
	// sign makes a key and a certificate from tmpl, signed by parent's key
	// (self-signed when parent is nil), and returns both.
	sign := func(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		require.NoError(t, err)
		cert, err := x509.ParseCertificate(der)
		require.NoError(t, err)
		return cert, key
	}
	files := func(name string, cert *x509.Certificate, key *ecdsa.PrivateKey) (string, string) {
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		return write(name+".pem", "CERTIFICATE", cert.Raw), write(name+".key", "PRIVATE KEY", keyDER)
	}
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey) {
		return sign(&x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	}
	leaf := func(name string, usage x509.ExtKeyUsage) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: name}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	}

	var p cliPKI
	ca, caKey := newCA("cli test CA")
	p.caFile = write("ca.pem", "CERTIFICATE", ca.Raw)
	srv, srvKey := sign(leaf("styx", x509.ExtKeyUsageServerAuth), ca, caKey)
	p.serverCert, p.serverKey = files("server", srv, srvKey)
	cli, cliKey := sign(leaf("operator", x509.ExtKeyUsageClientAuth), ca, caKey)
	p.clientCert, p.clientKey = files("client", cli, cliKey)
	other, otherKey := newCA("other CA")
	stranger, strangerKey := sign(leaf("stranger", x509.ExtKeyUsageClientAuth), other, otherKey)
	p.strangerCert, p.strangerKey = files("stranger", stranger, strangerKey)
	return p
}

// runEnv runs args on a fresh root command that reads env instead of the
// process environment, and returns what it wrote and its error.
func runEnv(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut strings.Builder
	a := &app{stdout: &out, stderr: &errOut, now: time.Now,
		lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	r := a.rootCmd()
	r.SetArgs(args)
	err = r.ExecuteContext(t.Context())
	return out.String(), errOut.String(), err
}

// TestCLIClientCertificate runs the CLI against a server that requires
// client certificates (--tls-client-ca): it works with --cert-file and
// --key-file, or STYX_CERT_FILE and STYX_KEY_FILE; it exits 1 without a
// certificate, with another CA's, or with a certificate but no key.
func TestCLIClientCertificate(t *testing.T) {
	pki := newCLIPKI(t)
	d, admin := startAuthDaemon(t, pki.serverCert, pki.serverKey, pki.caFile)
	require.True(t, strings.HasPrefix(d.Endpoint(), "https://"))
	c := cli{t: t, endpoint: d.Endpoint()}
	tlsFlags := []string{"--ca-file", pki.caFile, "--cert-file", pki.clientCert, "--key-file", pki.clientKey}

	t.Run("Flags", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		c.ok(append([]string{"queues", "create", "mtls", "--api-key", admin}, tlsFlags...)...)
		require.Regexp(t, `(?m)^mtls\s`, c.ok(append([]string{"queues", "list", "--api-key", admin}, tlsFlags...)...))
		var out, errOut strings.Builder
		code := run(t.Context(), append([]string{"queues", "list", "--endpoint", d.Endpoint(), "--api-key", admin}, tlsFlags...), &out, &errOut)
		require.Equal(t, 0, code, errOut.String())
		require.Contains(t, out.String(), "mtls")
	})

	t.Run("Env", func(t *testing.T) {
		env := map[string]string{envEndpoint: d.Endpoint(), envAPIKey: admin,
			envCAFile: pki.caFile, envCertFile: pki.clientCert, envKeyFile: pki.clientKey}
		out, errOut, err := runEnv(t, env, "queues", "list")
		require.NoError(t, err, errOut)
		require.Regexp(t, `(?m)^mtls\s`, out)

		// A flag wins over its variable: a wrong certificate in the
		// environment is not used when --cert-file and --key-file are given.
		env[envCertFile], env[envKeyFile] = pki.strangerCert, pki.strangerKey
		_, _, err = runEnv(t, env, "queues", "list")
		require.Error(t, err)
		out, errOut, err = runEnv(t, env, "queues", "list", "--cert-file", pki.clientCert, "--key-file", pki.clientKey)
		require.NoError(t, err, errOut)
		require.Regexp(t, `(?m)^mtls\s`, out)
	})

	for name, args := range map[string][]string{
		"NoCertificate":      {"--ca-file", pki.caFile},
		"CertificateOfOther": {"--ca-file", pki.caFile, "--cert-file", pki.strangerCert, "--key-file", pki.strangerKey},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut strings.Builder
			code := run(t.Context(), append([]string{"queues", "list", "--endpoint", d.Endpoint(), "--api-key", admin}, args...), &out, &errOut)
			require.Equal(t, exitError, code)
			require.Empty(t, out.String())
			require.Regexp(t, `^styx: .*remote error: tls: certificate required`, errOut.String())
			require.Contains(t, errOut.String(), "(the server requires a client certificate signed by its --tls-client-ca: "+
				"see --cert-file and --key-file, or STYX_CERT_FILE and STYX_KEY_FILE)\n")
		})
	}

	t.Run("CertificateWithoutKey", func(t *testing.T) {
		var out, errOut strings.Builder
		code := run(t.Context(), []string{"queues", "list", "--endpoint", d.Endpoint(), "--api-key", admin,
			"--ca-file", pki.caFile, "--cert-file", pki.clientCert}, &out, &errOut)
		require.Equal(t, exitError, code)
		require.Equal(t, "styx: --cert-file (env STYX_CERT_FILE) and --key-file (env STYX_KEY_FILE): set both or neither\n", errOut.String())

		_, _, err := runEnv(t, map[string]string{envKeyFile: pki.clientKey}, "queues", "list", "--endpoint", d.Endpoint())
		require.ErrorContains(t, err, "--cert-file (env STYX_CERT_FILE) and --key-file (env STYX_KEY_FILE): set both or neither")
	})

	t.Run("UnreadableFile", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "missing.pem")
		_, _, err := c.run("queues", "list", "--api-key", admin, "--ca-file", pki.caFile, "--cert-file", missing, "--key-file", pki.clientKey)
		require.ErrorContains(t, err, missing)
	})
}

// TestCLIClientFlagsOnEveryCommand checks that every command but `styx
// server` (and its subcommands) takes the client flags, so each can reach
// a server that requires a client certificate.
func TestCLIClientFlagsOnEveryCommand(t *testing.T) {
	root := newRootCmd(&strings.Builder{}, &strings.Builder{})
	var walk func(cmd *cobra.Command)
	n := 0
	walk = func(cmd *cobra.Command) {
		if cmd.Annotations["styx/offline"] != "" { // server, restore, migrate
			return
		}
		if cmd != root && cmd.Runnable() {
			n++
			for _, name := range []string{"endpoint", "api-key", "ca-file", "cert-file", "key-file", "json"} {
				require.NotNil(t, cmd.Flag(name), "%s has no --%s", cmd.CommandPath(), name)
			}
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
	require.Greater(t, n, 20, "the walk found the client commands")
}
