package sqs_test

// The SQS door's functional tests (issue 36): the real AWS SDK (and the Go
// client, to look at what an SQS call did through /v1) over HTTP against an
// in-process server (styxtest), on every storage backend.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/pgtest"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

var ctx = context.Background()

// rlo is U+202E RIGHT-TO-LEFT OVERRIDE: "invoice\u202Efdp.exe" shows as
// "invoiceexe.pdf".
const rlo = "\u202e"

var logSkip sync.Once

// forEachBackend runs fn as a parallel subtest per storage backend (memory,
// pebble, postgres), with the options that start a server on it. The
// postgres subtest gets a schema of its own (pgtest.URL); without a test
// database it is left out, with the skip logged once, unless
// STYX_TEST_REQUIRE_POSTGRES makes it fail.
func forEachBackend(t *testing.T, fn func(t *testing.T, b styxtest.Options)) {
	t.Helper()
	for _, storage := range []string{daemon.StorageMemory, daemon.StoragePebble, daemon.StoragePostgres} {
		if storage == daemon.StoragePostgres && os.Getenv(pgtest.EnvURL) == "" && os.Getenv(pgtest.EnvRequire) == "" {
			logSkip.Do(func() { t.Logf("postgres backend skipped: %s is not set (see internal/pgtest)", pgtest.EnvURL) })
			continue
		}
		t.Run(storage, func(t *testing.T) {
			t.Parallel()
			b := styxtest.Options{Storage: storage}
			if storage == daemon.StoragePostgres {
				b.PostgresURL = pgtest.URL(t)
			}
			fn(t, b)
		})
	}
}

// server is a running in-process server; C is its Go client.
type server struct {
	*styxtest.Server
	t *testing.T
	C *styx.Client
}

// start starts a server as b says (its logs on stderr with STYX_TEST_LOG
// set) and stops it at the end of the test.
func start(t *testing.T, b styxtest.Options) *server {
	t.Helper()
	if os.Getenv("STYX_TEST_LOG") != "" {
		b.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s := styxtest.Start(t, b)
	return &server{Server: s, t: t, C: s.Client}
}

// startSQSAuth starts a server with --auth, an admin key file and a secret
// key file (keys created then carry a sealed secret for SigV4); s.C sends
// the bootstrap admin key, which it returns.
func startSQSAuth(t *testing.T, b styxtest.Options) (*server, string) {
	t.Helper()
	admin := randomHex(t, 32)
	dir := t.TempDir()
	adminFile, secretFile := filepath.Join(dir, "admin.key"), filepath.Join(dir, "secret.key")
	require.NoError(t, os.WriteFile(adminFile, []byte(admin+"\n"), 0o600))
	require.NoError(t, os.WriteFile(secretFile, []byte(randomHex(t, 32)+"\n"), 0o600))
	b.APIKey = admin
	b.Configure = func(cfg *daemon.Config) { cfg.Auth, cfg.AdminKeyFile, cfg.SecretKeyFile = true, adminFile, secretFile }
	return start(t, b), admin
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// sqsClient is the real AWS SDK's SQS client pointed at s, with static
// credentials (any signature is accepted without --auth) and no retries,
// so each call is one request.
func (s *server) sqsClient(keyID, secret string) *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.Endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret}, nil
		}),
		Retryer: aws.NopRetryer{},
	})
}

// client returns a Go client of s sending key (none when empty).
func (s *server) client(key string) *styx.Client {
	s.t.Helper()
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: s.Endpoint, APIKey: key})
	require.NoError(s.t, err)
	s.t.Cleanup(c.Close)
	return c
}

// newKey creates a key with the admin client and returns its secret.
func (s *server) newKey(name string, scopes []string, queues ...string) string {
	s.t.Helper()
	res, err := s.C.KeysCreate(ctx, &pb.KeysCreateRequest{Name: name, Scopes: scopes, Queues: queues})
	require.NoError(s.t, err)
	require.Equal(s.t, name, res.Name)
	require.NotEmpty(s.t, res.Key)
	return res.Key
}

// items lists the items of every partition of a queue that
// storage/items.list lists: every item but the scheduled ones.
func (s *server) items(queue string) []*pb.StorageItem {
	s.t.Helper()
	info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: queue})
	require.NoError(s.t, err)
	var all []*pb.StorageItem
	for p := range info.RequestedPartitions {
		pivot := ""
		for {
			res, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: queue, Partition: p, Pivot: pivot, Limit: 1000})
			require.NoError(s.t, err)
			page := res.Items
			if pivot != "" && len(page) > 0 && page[0].Id == pivot {
				page = page[1:] // the pivot is inclusive: seen on the last page
			}
			all = append(all, page...)
			if len(res.Items) < 1000 {
				break
			}
			pivot = res.Items[len(res.Items)-1].Id
		}
	}
	return all
}

// waitItems polls until queue holds n items and returns them.
func (s *server) waitItems(queue string, n int) []*pb.StorageItem {
	s.t.Helper()
	var got []*pb.StorageItem
	eventually(s.t, func() bool { got = s.items(queue); return len(got) == n }, "queue %s should hold %d items", queue, n)
	return got
}

// eventually polls cond every 10ms until it holds or 10s pass.
func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 10*time.Millisecond, append([]any{msg}, args...)...)
}

// requireSQSError asserts err is the SQS error code (the SDK's ErrorCode,
// which is the legacy code of x-amzn-query-error when it is sent) with a
// message containing each of parts.
func requireSQSError(t *testing.T, err error, code string, parts ...string) {
	t.Helper()
	require.Error(t, err)
	var ae smithy.APIError
	require.True(t, errors.As(err, &ae), "not an API error: %v", err)
	require.Equal(t, code, ae.ErrorCode(), err.Error())
	for _, p := range parts {
		require.Contains(t, ae.ErrorMessage(), p)
	}
}

// requireCode asserts err is a /v1 client error with code and a message
// containing each of parts.
func requireCode(t *testing.T, err error, code int, parts ...string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, styx.ErrorCode(err), err.Error())
	for _, p := range parts {
		require.Contains(t, err.Error(), p)
	}
}
