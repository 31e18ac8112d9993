package service_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestAuthKeyDeletionOtherNode checks, on PostgreSQL, that a key created on
// one node works on another at once, and that its deletion on the first
// is refused by the second at once (no cache to expire).
func TestAuthKeyDeletionOtherNode(t *testing.T) {
	if os.Getenv(pgtest.EnvURL) == "" && os.Getenv(pgtest.EnvRequire) == "" {
		t.Skipf("postgres: %s is not set", pgtest.EnvURL)
	}
	b := servertest.Backend{Name: "postgres", URL: pgtest.URL(t)}
	a, admin := servertest.StartAuth(t, b)
	a.CreateQueue(&pb.QueueInfo{QueueName: "q"})
	bNode := &servertest.Server{T: t, B: b}
	file := filepath.Join(t.TempDir(), "admin.key")
	require.NoError(t, os.WriteFile(file, []byte(admin), 0o600))
	bNode.Configure = func(cfg *daemon.Config) { cfg.Auth, cfg.AdminKeyFile = true, file }
	bNode.Boot()
	t.Cleanup(bNode.Stop)

	for i := range 5 { // repeated: each round must hold with no delay
		key := a.NewKey("k"+string(rune('0'+i)), []string{"produce"})
		onB := bNode.Client(key)
		require.NoError(t, onB.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "q", Items: []*pb.QueueProduceItem{{Bytes: []byte("x")}}}))
		require.NoError(t, a.C.KeysDelete(ctx, &pb.KeysDeleteRequest{Name: "k" + string(rune('0'+i))}))
		err := onB.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "q", Items: []*pb.QueueProduceItem{{Bytes: []byte("y")}}})
		servertest.RequireCode(t, err, styx.CodeUnauthorized, "unknown API key")
	}
	require.Len(t, a.Items("q"), 5)
}

// TestAuthRedriveAudit checks that a redrive task records the key that
// started it, across a restart, and that dead-item deletes, queue deletes
// and redrives are logged with the key name.
func TestAuthRedriveAudit(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "src-dead"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "src", DeadQueue: "src-dead"})
		s.Produce("src", "a", "b")
		for range 2 {
			it := s.Lease("src", 1)
			s.Retry("src", it.Partition, &pb.QueueRetryItem{Id: it.Items[0].Id, Dead: true})
		}
		ops := s.Client(s.NewKey("oncall-alice", []string{"dead"}))
		task, err := ops.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "src-dead", Filter: &pb.DeadFilter{Kind: "test"}, RateLimit: 1})
		require.NoError(t, err)
		require.Equal(t, "oncall-alice", task.KeyName)
		_, err = ops.RedrivesCancel(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool {
			got, err := s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
			return err == nil && got.Status == "cancelled"
		}, "the task ends")
		del, err := ops.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "src-dead", All: true})
		require.NoError(t, err)
		s.Restart()
		got, err := s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		require.Equal(t, "oncall-alice", got.KeyName, "recorded with the task")
		list, err := s.C.RedrivesList(ctx, &pb.RedrivesListRequest{})
		require.NoError(t, err)
		require.Len(t, list.Tasks, 1)
		require.Equal(t, "oncall-alice", list.Tasks[0].KeyName)
		require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "src"}))

		logs := s.Logs.String()
		require.Contains(t, logs, `msg="audit: dead.redrive" path=/v1/dead.redrive key=oncall-alice queue=src-dead task=`+task.TaskId)
		require.Contains(t, logs, `msg="audit: redrives.cancel" path=/v1/redrives.cancel key=oncall-alice queue=src-dead task=`+task.TaskId)
		require.Contains(t, logs, `msg="audit: dead.delete" path=/v1/dead.delete key=oncall-alice queue=src-dead deleted=`+itoa(del.Deleted))
		require.Contains(t, logs, `msg="audit: queues.delete" path=/v1/queues.delete key=bootstrap-admin queue=src`)
	})
}

func itoa(n int64) string { return big.NewInt(n).String() }

// testPKI is a CA and certificates made for one test.
type testPKI struct {
	dir                   string
	caFile                string
	serverCert, serverKey string
	clientCert            tls.Certificate
	otherCAFile           string // a CA that signed neither server nor client
	clientCertFromOther   tls.Certificate
	// The client certificates above as PEM files, for
	// ClientConfig.CertFile and KeyFile.
	clientCertFile, clientKeyFile string
	otherCertFile, otherKeyFile   string
}

func newTestPKI(t *testing.T) *testPKI {
	p := &testPKI{dir: t.TempDir()}
	ca, caKey := newCA(t, "styx test CA")
	p.caFile = p.write(t, "ca.pem", "CERTIFICATE", ca.Raw)
	other, otherKey := newCA(t, "other CA")
	p.otherCAFile = p.write(t, "other.pem", "CERTIFICATE", other.Raw)

	srvDER, srvKey := newLeaf(t, ca, caKey, "styx server", true)
	p.serverCert = p.write(t, "server.pem", "CERTIFICATE", srvDER)
	p.serverKey = p.write(t, "server.key", "PRIVATE KEY", marshalKey(t, srvKey))

	cliDER, cliKey := newLeaf(t, ca, caKey, "worker", false)
	p.clientCert = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	p.clientCertFile = p.write(t, "client.pem", "CERTIFICATE", cliDER)
	p.clientKeyFile = p.write(t, "client.key", "PRIVATE KEY", marshalKey(t, cliKey))
	badDER, badKey := newLeaf(t, other, otherKey, "intruder", false)
	p.clientCertFromOther = tls.Certificate{Certificate: [][]byte{badDER}, PrivateKey: badKey}
	p.otherCertFile = p.write(t, "intruder.pem", "CERTIFICATE", badDER)
	p.otherKeyFile = p.write(t, "intruder.key", "PRIVATE KEY", marshalKey(t, badKey))
	return p
}

func (p *testPKI) write(t *testing.T, name, typ string, der []byte) string {
	path := filepath.Join(p.dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	return path
}

func marshalKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	b, err := x509.MarshalPKCS8PrivateKey(k)
	require.NoError(t, err)
	return b
}

var serial atomic.Int64

func newCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, key
}

func newLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, server bool) ([]byte, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return der, key
}

// TestAuthTLS serves HTTPS with a certificate from a CA made in the test:
// a client trusting the CA (CAFile) works, a client that does not is
// refused, and plain HTTP gets no API answer.
func TestAuthTLS(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		pki := newTestPKI(t)
		s, admin := servertest.StartAuthWith(t, b, func(cfg *daemon.Config) {
			cfg.TLSCertFile, cfg.TLSKeyFile = pki.serverCert, pki.serverKey
		}, func(cc *styx.ClientConfig) { cc.CAFile = pki.caFile })
		require.True(t, strings.HasPrefix(s.D.Endpoint(), "https://"))
		s.CreateQueue(&pb.QueueInfo{QueueName: "tls"})
		s.Produce("tls", "over-tls")
		require.Len(t, s.Items("tls"), 1)

		untrusting, err := styx.NewClient(styx.ClientConfig{Endpoint: s.D.Endpoint(), APIKey: admin})
		require.NoError(t, err)
		_, err = untrusting.QueuesList(ctx, &pb.QueuesListRequest{})
		require.Error(t, err)
		require.Contains(t, err.Error(), "certificate signed by unknown authority")

		wrongCA, err := styx.NewClient(styx.ClientConfig{Endpoint: s.D.Endpoint(), APIKey: admin, CAFile: pki.otherCAFile})
		require.NoError(t, err)
		_, err = wrongCA.QueuesList(ctx, &pb.QueuesListRequest{})
		require.Error(t, err)

		plain, err := styx.NewClient(styx.ClientConfig{Endpoint: "http://" + s.D.Addr(), APIKey: admin})
		require.NoError(t, err)
		_, err = plain.QueuesList(ctx, &pb.QueuesListRequest{})
		require.Error(t, err, "plain HTTP to a TLS port")
		require.Equal(t, 400, styx.ErrorCode(err), "Go's TLS server answers a plain request 400: %v", err)
	})
}

// TestAuthMutualTLS requires client certificates: a client without one, or
// with one from another CA, fails the handshake; one with a certificate of
// the configured CA works (and still needs its API key).
func TestAuthMutualTLS(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		pki := newTestPKI(t)
		s, admin := servertest.StartAuthWith(t, b, func(cfg *daemon.Config) {
			cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = pki.serverCert, pki.serverKey, pki.caFile
		}, func(cc *styx.ClientConfig) {
			cc.CAFile = pki.caFile
			cc.TLS = &tls.Config{Certificates: []tls.Certificate{pki.clientCert}}
		})
		s.CreateQueue(&pb.QueueInfo{QueueName: "mtls"})
		_, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "mtls"})
		require.NoError(t, err)

		t.Run("CertificateFromFiles", func(t *testing.T) {
			// ClientConfig.CertFile and KeyFile (the CLI's --cert-file and
			// --key-file) with CAFile: the files alone do.
			c, err := styx.NewClient(styx.ClientConfig{Endpoint: s.D.Endpoint(), APIKey: admin, CAFile: pki.caFile,
				CertFile: pki.clientCertFile, KeyFile: pki.clientKeyFile})
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "mtls", RequestTimeout: "10s",
				Items: []*pb.QueueProduceItem{{Utf8: "over-mutual-tls"}}}))
			require.Len(t, s.Items("mtls"), 1)
		})
		for name, cc := range map[string]styx.ClientConfig{
			"NoCertificate":           {},
			"CertificateOfOther":      {TLS: &tls.Config{Certificates: []tls.Certificate{pki.clientCertFromOther}}},
			"CertificateFilesOfOther": {CertFile: pki.otherCertFile, KeyFile: pki.otherKeyFile},
		} {
			t.Run(name, func(t *testing.T) {
				cc.Endpoint, cc.APIKey, cc.CAFile = s.D.Endpoint(), admin, pki.caFile
				c, err := styx.NewClient(cc)
				require.NoError(t, err)
				defer c.Close()
				_, err = c.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "mtls"})
				require.Error(t, err)
				require.Zero(t, styx.ErrorCode(err), "refused in the handshake, not by the API: %v", err)
				require.Regexp(t, `certificate|tls`, err.Error())
			})
		}
		t.Run("CertificateButNoKey", func(t *testing.T) {
			c, err := styx.NewClient(styx.ClientConfig{Endpoint: s.D.Endpoint(), CAFile: pki.caFile,
				TLS: &tls.Config{Certificates: []tls.Certificate{pki.clientCert}}})
			require.NoError(t, err)
			defer c.Close()
			_, err = c.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "mtls"})
			servertest.RequireCode(t, err, styx.CodeUnauthorized)
		})
	})
}
