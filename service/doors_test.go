package service_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// One set of rules behind every door (issue 36): the request pipeline's
// Host, Origin and cross-site checks, SigV4 binding, authentication before
// the body, and the audit of SQS calls, through the public API.

// rawSQS sends an SQS request to path as built by mod and returns the
// status and body.
func rawSQS(s *servertest.Server, method, path string, body string, mod func(*http.Request)) (int, string) {
	s.T.Helper()
	req, err := http.NewRequestWithContext(ctx, method, s.D.Endpoint()+path, strings.NewReader(body))
	require.NoError(s.T, err)
	req.Host = "127.0.0.1"
	if mod != nil {
		mod(req)
	}
	res, b := do(s, req)
	return res.StatusCode, string(b)
}

// queueExists reports whether the queue exists, through /v1.
func queueExists(s *servertest.Server, name string) bool {
	s.T.Helper()
	res, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{})
	require.NoError(s.T, err)
	for _, q := range res.Items {
		if q.QueueName == name {
			return true
		}
	}
	return false
}

// TestHealthIsNotSQS: finding 1, DNS rebinding through /health. An SQS
// request on /health is not served as SQS (route by path first), and a
// foreign Host is refused on every SQS path.
func TestHealthIsNotSQS(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		require.NoError(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "secret-orders"}))
		json := func(target string, host string) func(*http.Request) {
			return func(r *http.Request) {
				r.Host = host
				r.Header.Set("X-Amz-Target", "AmazonSQS."+target)
				r.Header.Set("Content-Type", "application/x-amz-json-1.0")
			}
		}
		for _, host := range []string{"evil.example", "evil.example:2319", "127.0.0.1"} {
			code, body := rawSQS(s, http.MethodPost, "/health", `{}`, json("ListQueues", host))
			require.NotEqual(t, 200, code, body)
			require.NotContains(t, body, "secret-orders")
			code, body = rawSQS(s, http.MethodPost, "/health", `{"QueueUrl":"http://127.0.0.1/000000000000/secret-orders"}`, json("DeleteQueue", host))
			require.NotEqual(t, 200, code, body)
		}
		// The SQS API itself refuses a foreign Host.
		code, body := rawSQS(s, http.MethodPost, "/", `{}`, json("ListQueues", "evil.example"))
		require.Equal(t, 403, code, body)
		require.NotContains(t, body, "secret-orders")
		// An SQS header on any other path is not SQS either.
		code, body = rawSQS(s, http.MethodPost, "/v1/queues.list", `{}`, json("ListQueues", "127.0.0.1"))
		require.NotContains(t, body, "QueueUrls")
		_ = code
		require.True(t, queueExists(s, "secret-orders"))
		// /health still answers a probe, by any Host, with GET.
		code, body = rawSQS(s, http.MethodGet, "/health", "", func(r *http.Request) { r.Host = "10.0.0.7:2319" })
		require.Equal(t, 200, code, body)
	})
}

// TestCrossSiteCallsRefused: finding 2. Without --auth, what a web page on
// another origin can send without a preflight is refused: an <img>'s GET
// of the query protocol, a form POST from a sandboxed iframe (Origin:
// null), an Origin naming another loopback port, and any call a browser
// marks cross-site. Nothing is done.
func TestCrossSiteCallsRefused(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		require.NoError(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "victim"}))
		qurl := "http://127.0.0.1/000000000000/victim"

		code, body := rawSQS(s, http.MethodGet, "/?Action=DeleteQueue&QueueUrl="+url.QueryEscape(qurl), "", nil)
		require.Equal(t, 403, code, body)
		require.Contains(t, body, "--auth")
		require.True(t, queueExists(s, "victim"))

		form := url.Values{"Action": {"SendMessage"}, "QueueUrl": {qurl}, "MessageBody": {"forged"}}.Encode()
		formPost := func(origin string) func(*http.Request) {
			return func(r *http.Request) {
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				if origin != "" {
					r.Header.Set("Origin", origin)
				}
			}
		}
		for _, origin := range []string{"null", "", "http://evil.example", "http://127.0.0.1:9999"} {
			code, body = rawSQS(s, http.MethodPost, "/", form, formPost(origin))
			require.Equal(t, 403, code, "origin %q: %s", origin, body)
		}
		// Signed (as every SDK signs), from no browser, it is served.
		code, body = rawSQS(s, http.MethodPost, "/", form, func(r *http.Request) {
			formPost("")(r)
			r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20261127/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature=0")
		})
		require.Equal(t, 200, code, body)
		// But not when a browser says the call is cross-site.
		code, body = rawSQS(s, http.MethodPost, "/", form, func(r *http.Request) {
			formPost("")(r)
			r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20261127/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature=0")
			r.Header.Set("Sec-Fetch-Site", "cross-site")
		})
		require.Equal(t, 403, code, body)

		// /v1: an Origin naming another port of the loopback host, or null,
		// is foreign; the server's own origin is not.
		produce := `{"queue_name":"victim","request_timeout":"1m","items":[{"utf8":"x"}]}`
		for _, origin := range []string{"http://127.0.0.1:9999", "null", "https://" + s.D.Addr(), "http://localhost.evil.example"} {
			code, body = rawSQS(s, http.MethodPost, "/v1/queue.produce", produce, func(r *http.Request) {
				r.Host = s.D.Addr()
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Origin", origin)
			})
			require.Equal(t, 403, code, "origin %q: %s", origin, body)
		}
		code, body = rawSQS(s, http.MethodPost, "/v1/queue.produce", produce, func(r *http.Request) {
			r.Host = s.D.Addr()
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Sec-Fetch-Site", "cross-site")
		})
		require.Equal(t, 403, code, body)
		stats, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "victim"})
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.LogicalQueues[0].Partitions[0].Total, "only the signed SendMessage produced")
		// The console's own origin works.
		code, body = rawSQS(s, http.MethodPost, "/v1/queue.produce", produce, func(r *http.Request) {
			r.Host = s.D.Addr()
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Origin", "http://"+s.D.Addr())
			r.Header.Set("Sec-Fetch-Site", "same-origin")
		})
		require.Equal(t, 200, code, body)
	})
}

// TestSQSAuthenticatesBeforeTheBody: finding 3. With --auth, an SQS
// request without a valid signature is refused as soon as its headers
// arrive, before its (announced 60 MiB) body is sent.
func TestSQSAuthenticatesBeforeTheBody(t *testing.T) {
	s, _ := servertest.StartSQSAuth(t, memoryBackend(t))
	for _, authz := range []string{
		"",
		"AWS4-HMAC-SHA256 Credential=0123456789abcdef/20261127/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature=00",
	} {
		c, err := net.Dial("tcp", s.D.Addr())
		require.NoError(t, err)
		head := "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n" +
			"X-Amz-Date: " + time.Now().UTC().Format("20060102T150405Z") + "\r\nContent-Length: 62914560\r\n"
		if authz != "" {
			head += "Authorization: " + authz + "\r\n"
		}
		_, err = io.WriteString(c, head+"\r\nAction=SendMessage&")
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "no answer before the body was sent")
		require.Equal(t, 403, res.StatusCode)
		_ = res.Body.Close()
		_ = c.Close()
	}
}

// signedSQS returns an SQS JSON request for target and body signed with
// key for service and region, with the X-Amz-Target header set before
// signing when signTarget, after otherwise.
func signedSQS(s *servertest.Server, t *testing.T, keyID, key, target, body, service, region string, signTarget bool) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.D.Endpoint()+"/", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	if signTarget {
		req.Header.Set("X-Amz-Target", "AmazonSQS."+target)
	}
	sum := sha256.Sum256([]byte(body))
	require.NoError(t, v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: keyID, SecretAccessKey: key},
		req, hex.EncodeToString(sum[:]), service, region, time.Now()))
	if !signTarget {
		req.Header.Set("X-Amz-Target", "AmazonSQS."+target)
	}
	return req
}

// TestSigV4BindsServiceRegionAndAction: finding 7. A signature scoped to
// another service or region is refused, and one that leaves x-amz-target
// unsigned cannot be replayed as another action.
func TestSigV4BindsServiceRegionAndAction(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, admin := servertest.StartSQSAuth(t, b)
		require.NoError(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "held"}))
		err := s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "held", Items: []*pb.QueueProduceItem{{Utf8: "keep me"}}})
		require.NoError(t, err)
		body := `{"QueueUrl":"http://127.0.0.1/000000000000/held"}`
		try := func(req *http.Request) (int, string) {
			res, b := do(s, req)
			return res.StatusCode, string(b)
		}
		code, out := try(signedSQS(s, t, "bootstrap-admin", admin, "GetQueueAttributes", body, "sqs", "us-east-1", true))
		require.Equal(t, 200, code, out)
		code, out = try(signedSQS(s, t, "bootstrap-admin", admin, "GetQueueAttributes", body, "s3", "us-east-1", true))
		require.Equal(t, 403, code, out)
		require.Contains(t, out, "service")
		code, out = try(signedSQS(s, t, "bootstrap-admin", admin, "GetQueueAttributes", body, "sqs", "eu-west-9", true))
		require.Equal(t, 403, code, out)
		require.Contains(t, out, "region")
		code, out = try(signedSQS(s, t, "bootstrap-admin", admin, "PurgeQueue", body, "sqs", "us-east-1", false))
		require.Equal(t, 403, code, out)
		require.Contains(t, out, "x-amz-target")
		stats, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "held"})
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.LogicalQueues[0].Partitions[0].Total, "the replayed purge ran")
	})
}

// TestSQSAudited: finding 6. SQS calls that make, change, purge or delete
// queues write the same audit lines as /v1, with the key's name, and a
// refused SQS call is logged as refused.
func TestSQSAudited(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, admin := servertest.StartSQSAuth(t, b)
		s.LogInfo = true
		s.Restart() // now keeping the audit lines
		c := s.SQSClient("bootstrap-admin", admin)
		created, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("audited")})
		require.NoError(t, err)
		_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: created.QueueUrl, Attributes: map[string]string{"DelaySeconds": "1"}})
		require.NoError(t, err)
		_, err = c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: created.QueueUrl})
		require.NoError(t, err)
		_, err = c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: created.QueueUrl})
		require.NoError(t, err)
		_, err = s.SQSClient("bootstrap-admin", admin+"x").ListQueues(ctx, &awssqs.ListQueuesInput{})
		require.Error(t, err)
		logs := s.Logs.String()
		for _, op := range []string{"queues.create", "queues.update", "queue.clear", "queues.delete"} {
			require.Contains(t, logs, fmt.Sprintf("msg=\"audit: %s\" path=/v1/%s key=bootstrap-admin queue=audited", op, op))
		}
		require.Contains(t, logs, "door=sqs action=DeleteQueue")
		require.Contains(t, logs, "msg=\"request refused\" path=/ code=403")
		require.Contains(t, logs, "SignatureDoesNotMatch")

		// The activity log has them too (issue 49), door and action
		// included, newest first; the deleted queue's records stay.
		acts, err := s.C.ActivityList(ctx, &pb.ActivityListRequest{QueueName: "audited"})
		require.NoError(t, err)
		var got []string
		for _, r := range acts.Records {
			require.Equal(t, "sqs", r.Door)
			require.Equal(t, "bootstrap-admin", r.KeyName)
			got = append(got, r.Op+" "+r.Action)
		}
		require.Equal(t, []string{"queues.delete DeleteQueue", "queue.clear PurgeQueue", "queues.update SetQueueAttributes",
			"queues.create CreateQueue"}, got)
	})
}

// zeros is an endless reader of zero bytes that allocates nothing.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// produceBody streams a protobuf queue.produce request of n items of size
// bytes each (zeros) into queue, allocating nothing for the payloads, and
// returns it with its length.
func produceBody(queue string, n, size int) (io.Reader, int64) {
	item := protowire.AppendTag(nil, 5, protowire.BytesType)
	item = protowire.AppendVarint(item, uint64(size))
	itemLen := len(item) + size
	head := protowire.AppendTag(nil, 1, protowire.BytesType)
	head = protowire.AppendString(head, queue)
	head = protowire.AppendTag(head, 2, protowire.BytesType)
	head = protowire.AppendString(head, "1m")
	readers := []io.Reader{bytes.NewReader(head)}
	total := int64(len(head))
	for range n {
		h := protowire.AppendTag(nil, 3, protowire.BytesType)
		h = protowire.AppendVarint(h, uint64(itemLen))
		h = append(h, item...)
		readers = append(readers, bytes.NewReader(h), io.LimitReader(zeros{}, int64(size)))
		total += int64(len(h) + size)
	}
	return io.MultiReader(readers...), total
}

// heldMemory returns the memory the Go runtime holds from the OS, in
// bytes: everything it has mapped but what it has released. It is the
// server's resident memory without what the race detector adds beside it
// (its shadow memory grows with the heap), so it reads the same with and
// without -race.
func heldMemory() int64 {
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(samples)
	return int64(samples[0].Value.Uint64()) - int64(samples[1].Value.Uint64())
}

// memoryGrowth starts sampling heldMemory every 5ms, from a collected heap;
// the function it returns stops and returns the peak's growth, in bytes.
// Meanwhile the collector runs at Go's default GOGC of 100, whatever the
// environment says (make test sets 400), as a server's does: the budget is
// the server's, not the test run's.
func memoryGrowth() func() int64 {
	gcPercent := debug.SetGCPercent(100)
	runtime.GC()
	debug.FreeOSMemory()
	base := heldMemory()
	var peak atomic.Int64
	done, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if r := heldMemory(); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() int64 {
		close(done)
		<-sampled
		debug.SetGCPercent(gcPercent)
		return peak.Load() - base
	}
}

// TestMemoryBudget: finding 4. Sixteen concurrent 48 MB produces and six
// unauthenticated 48 MB SQS bodies keep the server's memory growth under
// its in-flight byte budget plus a small constant: what the budget cannot
// hold now is answered 503 with Retry-After, and the produces it admits
// succeed. The server runs in this process, so its memory is the
// process's (heldMemory); the clients stream their bodies without holding
// them.
func TestMemoryBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 1 GB through the server")
	}
	const budget = 256 << 20
	const slack = 160 << 20                                           // the Go runtime's, Pebble's memtable, the server's buffers
	s, admin := servertest.StartSQSAuth(t, servertest.Backends(t)[1]) // pebble: items on disk, not in RSS
	require.NoError(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "big"}))
	growth := memoryGrowth()
	var wg sync.WaitGroup
	codes := make(chan int, 22)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, n := produceBody("big", 10, 4_800_000)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.D.Endpoint()+"/v1/queue.produce", body)
			if !assert.NoError(t, err) {
				return
			}
			req.ContentLength = n
			req.Header.Set("Content-Type", "application/protobuf")
			req.Header.Set("Authorization", "Bearer "+admin)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- 0 // the server answered before taking the whole body
				return
			}
			if res.StatusCode == 503 {
				assert.NotEmpty(t, res.Header.Get("Retry-After"))
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			codes <- res.StatusCode
		}()
	}
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.D.Endpoint()+"/",
				io.MultiReader(strings.NewReader("Action=SendMessage&MessageBody="), io.LimitReader(zeros{}, 48_000_000)))
			if !assert.NoError(t, err) {
				return
			}
			req.ContentLength = 48_000_000 + int64(len("Action=SendMessage&MessageBody="))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			res, err := http.DefaultClient.Do(req)
			if err == nil {
				assert.Equal(t, 403, res.StatusCode)
				_ = res.Body.Close()
			}
		}()
	}
	wg.Wait()
	grew := growth()
	close(codes)
	ok := 0
	for c := range codes {
		if c == 200 {
			ok++
		} else {
			require.Contains(t, []int{0, 503}, c)
		}
	}
	require.Positive(t, ok, "no produce was admitted")
	t.Logf("memory grew by %d MiB (budget %d MiB); %d of 16 produces admitted", grew>>20, budget>>20, ok)
	require.Less(t, grew, int64(budget+slack), "memory grew past the budget")
}

// TestChunkedBodiesAdmitted: a body sent without a Content-Length
// (chunked) is held to the same limits as one that states its length: over
// --max-request-bytes it is 400 naming the limit, and while the in-flight
// budget is full it is 503 with Retry-After, not a 455 "invalid body".
func TestChunkedBodiesAdmitted(t *testing.T) {
	s := servertest.StartWith(t, memoryBackend(t), func(cfg *daemon.Config) {
		cfg.MaxRequestBytes = 1 << 20
		cfg.MaxInflightBytes = 3 << 20 // one body of the largest size at a time
		cfg.BodyReadTimeout = 20 * time.Second
	})
	chunked := func(n int64) (int, http.Header, string) {
		body, _ := produceBody("nope", 1, int(n))
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.D.Endpoint()+"/v1/queue.produce", io.MultiReader(body))
		require.NoError(t, err)
		req.ContentLength = -1 // chunked
		req.Header.Set("Content-Type", "application/protobuf")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}
	code, _, body := chunked(2 << 20)
	require.Equal(t, 400, code, body)
	require.Contains(t, body, "larger than the limit of 1048576 bytes")

	// A body that states 1 MiB and stalls holds the whole budget, once the
	// previous request's charge is given back (just after its answer): a
	// stalled request answered at once was refused, and is sent again.
	servertest.Eventually(t, func() bool {
		c, err := net.Dial("tcp", s.D.Addr())
		require.NoError(t, err)
		_, err = io.WriteString(c, "POST /v1/queue.produce HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/protobuf\r\n"+
			"Content-Length: 1048576\r\n\r\n\x0a")
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
		if _, err := c.Read(make([]byte, 1)); err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			t.Cleanup(func() { _ = c.Close() })
			return true // no answer: it holds the budget
		}
		_ = c.Close()
		return false
	}, "a stalled 1 MiB body is admitted")
	var header http.Header
	servertest.Eventually(t, func() bool {
		code, header, body = chunked(64 << 10)
		return code == 503
	}, "a chunked body is refused while the budget is full")
	require.Equal(t, "1", header.Get("Retry-After"))
	require.Contains(t, body, "in-flight request budget is full")
}
