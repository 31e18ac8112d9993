// Package styx is the Go client of Styx, a leased FIFO work queue with
// first-class dead-letter handling that speaks Querator's v1 HTTP API.
//
//	c, err := styx.NewClient(styx.ClientConfig{Endpoint: "http://127.0.0.1:2319"})
//	err = c.QueueProduce(ctx, &styxpb.QueueProduceRequest{QueueName: "orders", Items: ...})
//
// Every call takes a context first and returns an *Error carrying the
// DUH-RPC code when the server refused the request.
package styx

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	v1 "github.com/duh-rpc/duh-go/proto/v1"
	"google.golang.org/protobuf/proto"

	pb "github.com/styxq/styx/styxpb"
)

// DefaultEndpoint is where `styx server` listens by default.
const DefaultEndpoint = "http://127.0.0.1:2319"

// ClientConfig configures a Client.
type ClientConfig struct {
	// Endpoint is the server's base URL. Defaults to DefaultEndpoint.
	Endpoint string
	// HTTPClient sends the requests. Defaults to a client with no overall
	// timeout (leases long-poll; bound them with the context), using TLS,
	// CAFile, CertFile and KeyFile for https:// endpoints. When set, those
	// four are ignored (CertFile and KeyFile must still come as a pair):
	// configure its transport yourself.
	HTTPClient *http.Client
	// APIKey, when set, is sent with every request as "Authorization:
	// Bearer <APIKey>" (as Querator's ClientConfig.APIKey is), for a server
	// started with --auth. Empty sends no Authorization header.
	APIKey string
	// TLS configures https:// connections (client certificates for mutual
	// TLS, root CAs, server name). Nil uses Go's defaults: the system roots,
	// plus CAFile when set, and the certificate of CertFile when set.
	// NewClient clones it and never changes the caller's copy.
	TLS *tls.Config
	// CAFile names a PEM file of CA certificates to trust for https://
	// endpoints, added to TLS.RootCAs (or used alone when TLS is nil:
	// the server's certificate must chain to one of them). Empty: none.
	// NewClient fails if the file cannot be read or holds no certificate.
	CAFile string
	// CertFile and KeyFile name the PEM files of a client certificate
	// (CertFile: the leaf first, then any intermediates) and its private
	// key (KeyFile: PKCS #1, PKCS #8 or SEC 1, unencrypted), presented to
	// a server run with --tls-client-ca (mutual TLS). The pair is loaded
	// as tls.LoadX509KeyPair does and appended to TLS.Certificates; a
	// TLS.GetClientCertificate callback, if set, takes precedence over
	// TLS.Certificates. Set both or neither: NewClient fails naming both fields if
	// only one is set, and naming the file if one cannot be read, holds
	// no PEM block, or the key does not match the certificate. Empty: no
	// client certificate beyond those already in TLS.
	CertFile string
	KeyFile  string
	// RequestTimeout is the request_timeout sent on QueueProduce,
	// QueueLease and QueueComplete requests that leave theirs empty: the
	// server requires one
	// (as Querator does) and accepts 10ms to 15m. It is how long a lease
	// long-polls for items. Defaults to DefaultRequestTimeout (1 minute).
	RequestTimeout time.Duration
}

// DefaultRequestTimeout is ClientConfig.RequestTimeout when zero.
const DefaultRequestTimeout = time.Minute

// Client calls a Styx (or Querator) server. It is safe for concurrent use.
type Client struct {
	endpoint string
	http     *http.Client
	auth     string // the Authorization header value; empty for none
	timeout  string // ClientConfig.RequestTimeout, as sent
}

// NewClient returns a client. It does not connect. It fails, without
// contacting the server, on an endpoint that is neither http:// nor
// https://, on CertFile or KeyFile set without the other, and on a CAFile,
// CertFile or KeyFile that does not load (see ClientConfig).
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Endpoint == "" {
		cfg.Endpoint = DefaultEndpoint
	}
	if !strings.HasPrefix(cfg.Endpoint, "http://") && !strings.HasPrefix(cfg.Endpoint, "https://") {
		return nil, fmt.Errorf("styx: endpoint %q must start with http:// or https://", cfg.Endpoint)
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, fmt.Errorf("styx: CertFile and KeyFile: set both or neither (CertFile %q, KeyFile %q)", cfg.CertFile, cfg.KeyFile)
	}
	if cfg.HTTPClient == nil {
		tc, err := clientTLS(cfg)
		if err != nil {
			return nil, err
		}
		cfg.HTTPClient = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			TLSClientConfig:     tc, // for https through a proxy
			DialTLSContext:      dialTLS(tc),
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	var auth string
	if cfg.APIKey != "" {
		auth = "Bearer " + cfg.APIKey
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	return &Client{endpoint: strings.TrimRight(cfg.Endpoint, "/"), http: cfg.HTTPClient, auth: auth, timeout: cfg.RequestTimeout.String()}, nil
}

// clientTLS returns cfg.TLS (cloned, or nil when it is nil and no file is
// set) with the certificates of cfg.CAFile added to a copy of its roots and
// the key pair of cfg.CertFile and cfg.KeyFile appended to a copy of its
// certificates. The caller's TLS, pool and slice are left as they were.
func clientTLS(cfg ClientConfig) (*tls.Config, error) {
	var tc *tls.Config
	if cfg.TLS != nil {
		tc = cfg.TLS.Clone()
	}
	if cfg.CAFile == "" && cfg.CertFile == "" {
		return tc, nil
	}
	if tc == nil {
		tc = &tls.Config{}
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("styx: CA file: %w", err)
		}
		if tc.RootCAs == nil {
			tc.RootCAs = x509.NewCertPool()
		} else {
			tc.RootCAs = tc.RootCAs.Clone() // Clone shares the pool; do not add to the caller's
		}
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("styx: CA file %s holds no PEM certificate", cfg.CAFile)
		}
	}
	if cfg.CertFile != "" {
		cert, err := loadKeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, err
		}
		// Clip: appending must not write into the caller's backing array.
		tc.Certificates = append(slices.Clip(tc.Certificates), cert)
	}
	return tc, nil
}

// loadKeyPair loads a client certificate as tls.LoadX509KeyPair does, with
// errors that name the file at fault.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("styx: client certificate CertFile: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("styx: client certificate KeyFile: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("styx: client certificate CertFile %s, KeyFile %s: %w", certFile, keyFile, err)
	}
	return cert, nil
}

// Error is a request the server answered with a code other than 200.
// Decide by Code and Reason (ErrorCode, ErrorReason and the Is… helpers),
// never by Message, which is for people and may change.
type Error struct {
	// Code is the DUH-RPC code, equal to the HTTP status: 400 invalid
	// request (including a queue that does not exist: see
	// IsQueueNotExist), 401 no valid API key (CodeUnauthorized), 403 the
	// key lacks the call's scope or does not cover its queue
	// (CodeForbidden), 404 not found (a redrive task), 409 conflict, 453
	// storage unavailable, 454 retry (no items before the request
	// timeout, or an overloaded queue), 455 bad content, 500 internal, 501
	// no such method, 503 server busy.
	Code int
	// Reason says why, a stable word the server sends as
	// details["reason"] (one of the Reason… constants; several share a
	// Code): ReasonQueueNotFound, ReasonRequestTimeout… Empty when the
	// reply carried none: a server that sends no reasons, or an answer
	// that was not a duh.v1.Reply (a proxy's). docs/wire-contract.md
	// lists them.
	Reason string
	// Message is the server's explanation, "<what>; <detail>".
	Message string
	// Details are extra key/values the server sent, "reason" included.
	Details map[string]string
}

// Error returns "<code>: <message>".
func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Code, e.Message) }

// Codes of Error.Code.
const (
	CodeBadRequest   = 400
	CodeUnauthorized = 401
	CodeForbidden    = 403
	CodeNotFound     = 404
	CodeConflict     = 409
	// CodeUnavailable: storage failed the request (a database that is
	// down, a write or fsync the disk refused), on every storage backend.
	// Nothing was acknowledged and the request may be retried; a produce
	// whose fsync failed may still have been stored, so a retry can store
	// it twice (at-least-once).
	CodeUnavailable = 453
	CodeRetry       = 454
	CodeBadContent  = 455
	CodeInternal    = 500
)

// Reasons of Error.Reason, by code (docs/wire-contract.md says which to
// retry). A server may add reasons: treat one you do not know by its code.
const (
	// ReasonInvalidArgument (400): a rule not named below; the message
	// names the field.
	ReasonInvalidArgument = "invalid_argument"
	// ReasonQueueNotFound (400): the queue the request names does not
	// exist (IsQueueNotExist).
	ReasonQueueNotFound = "queue_not_found"
	// ReasonQueueExists (400): queues.create named a queue that exists
	// (IsQueueExists).
	ReasonQueueExists = "queue_exists"
	// ReasonDeadQueueNotFound (400): a queue's dead_queue does not exist.
	ReasonDeadQueueNotFound = "dead_queue_not_found"
	// ReasonDestinationNotFound (400): a redrive's destination does not
	// exist.
	ReasonDestinationNotFound = "destination_not_found"
	// ReasonNotDeadLetterQueue (400): a dead.* call named a queue that is
	// no queue's dead_queue.
	ReasonNotDeadLetterQueue = "not_dead_letter_queue"
	// ReasonNotLeased (400): an id of a complete, retry or renew is not
	// under a live lease (it expired, or the item was completed).
	ReasonNotLeased = "not_leased"
	// ReasonUnauthorized (401): no valid API key.
	ReasonUnauthorized = "unauthorized"
	// ReasonKeyRevoked (401): the key was deleted while the request
	// waited.
	ReasonKeyRevoked = "key_revoked"
	// ReasonForbidden (403): the key lacks the call's scope or does not
	// cover its queue.
	ReasonForbidden = "forbidden"
	// ReasonNotFound (404): a redrive task, an item or an API key does not
	// exist.
	ReasonNotFound = "not_found"
	// ReasonBodyTimeout (408): the request body did not arrive within the
	// server's body read timeout.
	ReasonBodyTimeout = "body_timeout"
	// ReasonConflict (409): the request conflicts with current state.
	ReasonConflict = "conflict"
	// ReasonTaskEnded (409): the redrive task has ended or is ending.
	ReasonTaskEnded = "task_ended"
	// ReasonMatchedChanged (409): a confirmed dead.delete or dead.redrive
	// matched another count than expect_matched; nothing was done.
	ReasonMatchedChanged = "matched_changed"
	// ReasonStorageUnavailable (453): storage failed the request
	// (IsUnavailable).
	ReasonStorageUnavailable = "storage_unavailable"
	// ReasonProduceTimeout (453): a produce's request_timeout passed
	// before its queue answered; its items may or may not be stored
	// (retry with the same deduplication ids to store them once).
	ReasonProduceTimeout = "produce_timeout"
	// ReasonQueueMoving (453): the queue is fenced while it moves to
	// another PostgreSQL cluster (queues.move); nothing was written,
	// retry.
	ReasonQueueMoving = "queue_moving"
	// ReasonRetry (454): retry later (an overloaded queue, a server
	// shutting down).
	ReasonRetry = "retry"
	// ReasonStorageConflict (454): the database refused the transaction
	// because of a concurrent one; nothing was applied.
	ReasonStorageConflict = "storage_conflict"
	// ReasonRequestTimeout (454): a lease found no item before its
	// request timeout (IsNoItems).
	ReasonRequestTimeout = "request_timeout"
	// ReasonDeduplicationLimit (454): the queue holds as many
	// deduplication ids as the server allows; nothing was stored.
	ReasonDeduplicationLimit = "deduplication_limit"
	// ReasonBadContent (455): the body could not be decoded.
	ReasonBadContent = "bad_content"
	// ReasonCanceled (499): the request was canceled (never read by a
	// client).
	ReasonCanceled = "canceled"
	// ReasonInternal (500): an error the server did not classify.
	ReasonInternal = "internal"
	// ReasonUnimplemented (501): no such method.
	ReasonUnimplemented = "unimplemented"
	// ReasonOverloaded (503): the server cannot admit the request now.
	ReasonOverloaded = "overloaded"
	// ReasonUnknown: a code without a reason of its own.
	ReasonUnknown = "unknown"
)

// ErrorCode returns the DUH-RPC code of err, or 0 if err is not an *Error.
func ErrorCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// ErrorReason returns the reason of err (Error.Reason), or "" if err is not
// an *Error or its reply carried no reason.
func ErrorReason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// IsRetry reports whether err says to retry later (454): a lease that
// found no items before its request timeout (IsNoItems), an overloaded
// queue, a storage conflict.
func IsRetry(err error) bool { return ErrorCode(err) == CodeRetry }

// IsUnavailable reports whether err is a 453 (CodeUnavailable): storage
// failed the request, the same answer on every backend for the same outage.
// It is temporary: retry later, as after IsRetry.
func IsUnavailable(err error) bool { return ErrorCode(err) == CodeUnavailable }

// IsNoItems reports whether err is the answer to a lease that found no
// item before its request timeout (ReasonRequestTimeout, 454): nothing
// went wrong, lease again. Other 454 answers (a server shutting down, an
// overloaded queue) are not.
func IsNoItems(err error) bool { return ErrorReason(err) == ReasonRequestTimeout }

// IsQueueNotExist reports whether err says the queue named in the request
// does not exist (ReasonQueueNotFound). The server answers that with 400,
// as Querator does, so the code alone does not tell it from other invalid
// requests.
func IsQueueNotExist(err error) bool { return ErrorReason(err) == ReasonQueueNotFound }

// IsQueueExists reports whether err says that a queues.create named a queue
// that exists (ReasonQueueExists; 400, as Querator answers it).
func IsQueueExists(err error) bool { return ErrorReason(err) == ReasonQueueExists }

// do posts in (protobuf) to path and decodes the reply into out.
func (c *Client) do(ctx context.Context, path string, in, out proto.Message) error {
	body, err := proto.Marshal(in)
	if err != nil {
		return fmt.Errorf("styx: encode %s: %w", path, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("styx: %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/protobuf")
	req.Header.Set("Accept", "application/protobuf")
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("styx: %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("styx: %s: read reply: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var reply v1.Reply
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/protobuf") || proto.Unmarshal(b, &reply) != nil {
			return &Error{Code: resp.StatusCode, Message: fmt.Sprintf("%s: %s", path, strings.TrimSpace(string(b)))}
		}
		return &Error{Code: int(reply.Code), Reason: reply.Details["reason"], Message: reply.Message, Details: reply.Details}
	}
	if out == nil {
		return nil
	}
	if err := proto.Unmarshal(b, out); err != nil {
		return fmt.Errorf("styx: %s: decode reply: %w", path, err)
	}
	return nil
}

// QueueProduce adds up to 1000 items to a queue; it returns when they are
// durable. An empty req.RequestTimeout is sent as ClientConfig's
// RequestTimeout (req itself is not changed). An item's Group (a Styx
// extension, empty for none) puts it in a group: on an ordered queue a
// group's items are leased in the order produced, within a request and
// across requests that follow one another (see docs/groups.md).
func (c *Client) QueueProduce(ctx context.Context, req *pb.QueueProduceRequest) error {
	if req.RequestTimeout == "" {
		req = &pb.QueueProduceRequest{QueueName: req.QueueName, RequestTimeout: c.timeout, Items: req.Items}
	}
	return c.do(ctx, "/v1/queue.produce", req, &pb.QueueProduceResponse{})
}

// QueueLease long-polls up to req.RequestTimeout for up to req.BatchSize
// items. With none, it returns an *Error with CodeRetry (see IsRetry). An
// empty req.RequestTimeout is sent as ClientConfig's RequestTimeout (req
// itself is not changed). With req.CompleteIds (a Styx extension), it first
// completes those leased items of req.CompletePartition, in the same step
// of the queue, and answers at once: the items ready then, or none (an
// empty response, not an error); one round trip and one write for a
// worker's complete and its next lease. With req.WaitAfterComplete too, it
// long-polls after its completes and answers an empty response, not an
// error, at req.RequestTimeout.
func (c *Client) QueueLease(ctx context.Context, req *pb.QueueLeaseRequest) (*pb.QueueLeaseResponse, error) {
	if req.RequestTimeout == "" {
		req = &pb.QueueLeaseRequest{QueueName: req.QueueName, BatchSize: req.BatchSize, ClientId: req.ClientId, RequestTimeout: c.timeout,
			CompleteIds: req.CompleteIds, CompletePartition: req.CompletePartition, WaitAfterComplete: req.WaitAfterComplete}
	}
	out := &pb.QueueLeaseResponse{}
	return out, c.do(ctx, "/v1/queue.lease", req, out)
}

// QueueComplete deletes leased items of one partition. An empty
// req.RequestTimeout is sent as ClientConfig's RequestTimeout (req itself
// is not changed).
func (c *Client) QueueComplete(ctx context.Context, req *pb.QueueCompleteRequest) error {
	if req.RequestTimeout == "" {
		req = &pb.QueueCompleteRequest{QueueName: req.QueueName, Partition: req.Partition, RequestTimeout: c.timeout, Ids: req.Ids}
	}
	return c.do(ctx, "/v1/queue.complete", req, &pb.QueueCompleteResponse{})
}

// QueueRetry ends leases without completion: requeue, schedule (retry_at),
// release (attempt not counted) or dead-letter (dead). The reply's Outcomes
// (a Styx extension; empty from Querator) say what became of each item, in
// request order. A retry that dead-letters items returns once they are in
// the dead-letter queue.
func (c *Client) QueueRetry(ctx context.Context, req *pb.QueueRetryRequest) (*pb.QueueRetryResponse, error) {
	out := &pb.QueueRetryResponse{}
	return out, c.do(ctx, "/v1/queue.retry", req, out)
}

// QueueRenew extends live leases of one partition to now + req.LeaseTimeout
// (the queue's lease_timeout when empty) and returns each item's new lease
// deadline (a Styx extension). Ids that are not leased, or whose lease has
// already expired, fail the whole call with CodeBadRequest naming them; no
// lease is changed then.
func (c *Client) QueueRenew(ctx context.Context, req *pb.QueueRenewRequest) (*pb.QueueRenewResponse, error) {
	out := &pb.QueueRenewResponse{}
	return out, c.do(ctx, "/v1/queue.renew", req, out)
}

// QueuesHistory returns a queue's last hour, a point per minute (items
// produced, completed, dead-lettered; depth; arrivals by error group on a
// dead-letter queue), as the server keeps it in memory. An empty
// req.QueueName sums every queue.
func (c *Client) QueuesHistory(ctx context.Context, req *pb.QueuesHistoryRequest) (*pb.QueuesHistoryResponse, error) {
	out := &pb.QueuesHistoryResponse{}
	return out, c.do(ctx, "/v1/queues.history", req, out)
}

// ActivityList returns a page of the activity log, newest first (a Styx
// extension, /v1/activity.list; the read scope): the audited calls that
// changed a queue or its items (req.QueueName; empty for every queue the
// key covers), each with the key that made it, when, and what it did (its
// details: "deleted" 6, "task" and "matched" of a redrive…). Records are
// kept 30 days, at most the newest 10,000. Pass resp.NextPivot as
// req.Pivot for the next page; it is empty at the end. CodeBadRequest for
// a limit out of 1..1000 or a pivot that is none; CodeForbidden for a
// queue the key does not cover.
func (c *Client) ActivityList(ctx context.Context, req *pb.ActivityListRequest) (*pb.ActivityListResponse, error) {
	out := &pb.ActivityListResponse{}
	return out, c.do(ctx, "/v1/activity.list", req, out)
}

// QueueStats describes a queue's partitions.
func (c *Client) QueueStats(ctx context.Context, req *pb.QueueStatsRequest) (*pb.QueueStatsResponse, error) {
	out := &pb.QueueStatsResponse{}
	return out, c.do(ctx, "/v1/queue.stats", req, out)
}

// QueueClear removes ready, scheduled or all items of a queue.
func (c *Client) QueueClear(ctx context.Context, req *pb.QueueClearRequest) error {
	return c.do(ctx, "/v1/queue.clear", req, &v1.Reply{})
}

// QueueClearDryRun says how many items QueueClear with the same request
// would remove now (ready, scheduled, leased and in all), removing nothing
// (a Styx extension, /v1/queue.clear_dry_run; the read scope suffices).
// Errors as QueueClear's: CodeBadRequest for an unknown queue or a request
// that selects nothing.
func (c *Client) QueueClearDryRun(ctx context.Context, req *pb.QueueClearRequest) (*pb.QueueClearDryRunResponse, error) {
	out := &pb.QueueClearDryRunResponse{}
	return out, c.do(ctx, "/v1/queue.clear_dry_run", req, out)
}

// QueuesPause pauses a queue's consumption and returns its definition
// (Paused, PausedAt): its leases then wait and get nothing, on every door
// and node, while produces, the completes, retries and renewals of leases
// already held and the dead-letter moves go on (a Styx extension,
// /v1/queues.pause; the admin scope). Pausing a paused queue keeps its
// PausedAt. CodeBadRequest for an unknown queue.
func (c *Client) QueuesPause(ctx context.Context, req *pb.QueuesPauseRequest) (*pb.QueueInfo, error) {
	out := &pb.QueueInfo{}
	return out, c.do(ctx, "/v1/queues.pause", req, out)
}

// QueuesResume resumes a paused queue's consumption, so that its waiting
// leases are served, and returns its definition (a Styx extension,
// /v1/queues.resume; the admin scope). Resuming a running queue changes
// nothing. CodeBadRequest for an unknown queue.
func (c *Client) QueuesResume(ctx context.Context, req *pb.QueuesPauseRequest) (*pb.QueueInfo, error) {
	out := &pb.QueueInfo{}
	return out, c.do(ctx, "/v1/queues.resume", req, out)
}

// QueuesMove moves a queue with everything in it to another PostgreSQL
// cluster (a Styx extension, /v1/queues.move, issue 47; the admin scope)
// and returns what moved once the queue serves there; the call lasts the
// copy (about a minute per million items), during which the queue
// answers 453 queue_moving and QueuesInfo shows the progress
// (QueueInfo.Move). Called again for a move in progress (a call that
// timed out, say), it continues that move. CodeBadRequest naming cluster
// on a server without several PostgreSQL clusters.
func (c *Client) QueuesMove(ctx context.Context, req *pb.QueuesMoveRequest) (*pb.QueuesMoveResponse, error) {
	out := &pb.QueuesMoveResponse{}
	return out, c.do(ctx, "/v1/queues.move", req, out)
}

// QueueReload rebuilds a queue's in-memory state from storage.
func (c *Client) QueueReload(ctx context.Context, req *pb.QueueReloadRequest) error {
	return c.do(ctx, "/v1/queue.reload", req, &pb.QueueReloadResponse{})
}

// QueuesCreate creates a queue.
func (c *Client) QueuesCreate(ctx context.Context, req *pb.QueueInfo) error {
	return c.do(ctx, "/v1/queues.create", req, &v1.Reply{})
}

// QueuesUpdate changes a queue's configuration. Without req.UpdateMask (a
// Styx extension) it changes the fields that are set and keeps the others,
// as for Querator's clients. With it, it sets exactly the fields listed
// (JSON names: "lease_timeout", "expire_timeout", "max_attempts",
// "requested_partitions", "dead_queue", "reference"), zero values included:
// UpdateMask {"dead_queue"} with DeadQueue "" removes the dead-letter queue.
// An update that names no field is refused with CodeBadRequest.
func (c *Client) QueuesUpdate(ctx context.Context, req *pb.QueueInfo) error {
	return c.do(ctx, "/v1/queues.update", req, &v1.Reply{})
}

// QueuesInfo returns a queue's configuration.
func (c *Client) QueuesInfo(ctx context.Context, req *pb.QueuesInfoRequest) (*pb.QueueInfo, error) {
	out := &pb.QueueInfo{}
	return out, c.do(ctx, "/v1/queues.info", req, out)
}

// QueuesList lists up to req.Limit (0: 1000, at most 65536) queues by name
// from req.Pivot (inclusive).
func (c *Client) QueuesList(ctx context.Context, req *pb.QueuesListRequest) (*pb.QueuesListResponse, error) {
	out := &pb.QueuesListResponse{}
	return out, c.do(ctx, "/v1/queues.list", req, out)
}

// QueuesDelete deletes a queue and its items.
func (c *Client) QueuesDelete(ctx context.Context, req *pb.QueuesDeleteRequest) error {
	return c.do(ctx, "/v1/queues.delete", req, &v1.Reply{})
}

// StorageItemsList lists up to req.Limit (0: 1000, at most 65536) of a
// partition's items in id order from req.Pivot (inclusive: the pivot's own
// item comes first when it still exists, as in Querator), with dead-letter
// metadata. To page, pass the last id of a page as the next pivot and drop
// the first item of the next page when it has that id.
func (c *Client) StorageItemsList(ctx context.Context, req *pb.StorageItemsListRequest) (*pb.StorageItemsListResponse, error) {
	out := &pb.StorageItemsListResponse{}
	return out, c.do(ctx, "/v1/storage/items.list", req, out)
}

// StorageScheduledList lists a partition's scheduled items from req.Pivot
// (inclusive), like StorageItemsList.
func (c *Client) StorageScheduledList(ctx context.Context, req *pb.StorageItemsListRequest) (*pb.StorageItemsListResponse, error) {
	out := &pb.StorageItemsListResponse{}
	return out, c.do(ctx, "/v1/storage/scheduled.list", req, out)
}

// StorageItemsImport adds items as given; it returns them with their ids.
func (c *Client) StorageItemsImport(ctx context.Context, req *pb.StorageItemsImportRequest) (*pb.StorageItemsImportResponse, error) {
	out := &pb.StorageItemsImportResponse{}
	return out, c.do(ctx, "/v1/storage/items.import", req, out)
}

// StorageItemsDelete removes items by id.
func (c *Client) StorageItemsDelete(ctx context.Context, req *pb.StorageItemsDeleteRequest) error {
	return c.do(ctx, "/v1/storage/items.delete", req, &v1.Reply{})
}

// Close closes the client's idle connections. In-flight calls are not
// affected; the client stays usable.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
}

// DeadList lists a dead-letter queue's items matching req.Filter (a queue
// that is no queue's dead_queue is refused with CodeBadRequest), oldest first, with
// their dead-letter metadata. Continue with req.Pivot = NextPivot until it is
// empty; a page may be short while NextPivot is set.
func (c *Client) DeadList(ctx context.Context, req *pb.DeadListRequest) (*pb.DeadListResponse, error) {
	out := &pb.DeadListResponse{}
	return out, c.do(ctx, "/v1/dead.list", req, out)
}

// DeadGroups returns the error groups of a dead-letter queue: its dead items
// by source queue, dead reason and error fingerprint, largest first. Pass a
// group's fingerprint (with its source queue and reason) as
// DeadFilter.Fingerprint to list, delete or redrive the group.
func (c *Client) DeadGroups(ctx context.Context, req *pb.DeadGroupsRequest) (*pb.DeadGroupsResponse, error) {
	out := &pb.DeadGroupsResponse{}
	return out, c.do(ctx, "/v1/dead.groups", req, out)
}

// DeadDelete deletes the dead items of a dead-letter queue that match
// req.Filter and returns how many were deleted. An empty filter (every dead
// item) must be confirmed with req.All; leased items are never deleted. A
// queue that is no queue's dead_queue is refused with CodeBadRequest.
func (c *Client) DeadDelete(ctx context.Context, req *pb.DeadDeleteRequest) (*pb.DeadDeleteResponse, error) {
	out := &pb.DeadDeleteResponse{}
	return out, c.do(ctx, "/v1/dead.delete", req, out)
}

// DeadEdit replaces the payload (and, when set, the kind and reference) of
// the dead item req.Id of a dead-letter queue, and returns the item as
// stored. Its history gets an entry with the old payload's size and
// SHA-256 and who edited it. An unknown item is CodeNotFound; a leased one
// CodeConflict.
func (c *Client) DeadEdit(ctx context.Context, req *pb.DeadEditRequest) (*pb.StorageItem, error) {
	out := &pb.StorageItem{}
	return out, c.do(ctx, "/v1/dead.edit", req, out)
}

// DeadRedrive starts a redrive task moving matching dead items back to their
// source queue (or req.Destination). With DryRun it only counts them. An
// empty filter must be confirmed with req.All (not with DryRun); leased
// items are skipped; a queue that is no queue's dead_queue is refused with
// CodeBadRequest. Several tasks may run on one queue when their items are
// disjoint: a task that would take items an unfinished task of the queue
// still holds is refused with CodeConflict naming that task, unless its
// filter names its items by id (each such item then goes to whichever task
// reaches it first).
func (c *Client) DeadRedrive(ctx context.Context, req *pb.DeadRedriveRequest) (*pb.RedriveTask, error) {
	out := &pb.RedriveTask{}
	return out, c.do(ctx, "/v1/dead.redrive", req, out)
}

// RedrivesList lists redrive tasks of a queue (every queue when
// req.QueueName is empty), newest first.
func (c *Client) RedrivesList(ctx context.Context, req *pb.RedrivesListRequest) (*pb.RedrivesListResponse, error) {
	out := &pb.RedrivesListResponse{}
	return out, c.do(ctx, "/v1/redrives.list", req, out)
}

// RedrivesGet returns a redrive task.
func (c *Client) RedrivesGet(ctx context.Context, req *pb.RedriveTaskRequest) (*pb.RedriveTask, error) {
	out := &pb.RedriveTask{}
	return out, c.do(ctx, "/v1/redrives.get", req, out)
}

// RedrivesCancel asks a running redrive task to stop after its current
// batch; it returns the task (status cancelling, then cancelled).
func (c *Client) RedrivesCancel(ctx context.Context, req *pb.RedriveTaskRequest) (*pb.RedriveTask, error) {
	out := &pb.RedriveTask{}
	return out, c.do(ctx, "/v1/redrives.cancel", req, out)
}

// RedrivesPause asks a running redrive task to stop after its current
// step; it returns the task (status pausing, then paused). A paused task
// moves nothing until RedrivesResume, across server restarts and
// failovers. A task that has ended or is cancelling is CodeConflict.
func (c *Client) RedrivesPause(ctx context.Context, req *pb.RedriveTaskRequest) (*pb.RedriveTask, error) {
	out := &pb.RedriveTask{}
	return out, c.do(ctx, "/v1/redrives.pause", req, out)
}

// RedrivesResume runs a paused redrive task again from where it stopped;
// it returns the task (status running). A task that has ended or is
// cancelling is CodeConflict.
func (c *Client) RedrivesResume(ctx context.Context, req *pb.RedriveTaskRequest) (*pb.RedriveTask, error) {
	out := &pb.RedriveTask{}
	return out, c.do(ctx, "/v1/redrives.resume", req, out)
}

// RedrivesUpdate sets the rate limit of a running or paused redrive task
// (req.RateLimit items per second, 0 to 1,000,000; 0 for none), from its
// next step. Out of range is CodeBadRequest; a task that has ended or is
// cancelling is CodeConflict.
func (c *Client) RedrivesUpdate(ctx context.Context, req *pb.RedrivesUpdateRequest) (*pb.RedriveTask, error) {
	out := &pb.RedriveTask{}
	return out, c.do(ctx, "/v1/redrives.update", req, out)
}

// KeysCreate creates an API key (admin scope on a key without queue
// patterns). The reply's Key is the secret: it is shown only here.
func (c *Client) KeysCreate(ctx context.Context, req *pb.KeysCreateRequest) (*pb.KeysCreateResponse, error) {
	out := &pb.KeysCreateResponse{}
	return out, c.do(ctx, "/v1/keys.create", req, out)
}

// KeysList lists the API keys by name, without their secrets.
func (c *Client) KeysList(ctx context.Context, req *pb.KeysListRequest) (*pb.KeysListResponse, error) {
	out := &pb.KeysListResponse{}
	return out, c.do(ctx, "/v1/keys.list", req, out)
}

// KeysDelete deletes an API key: requests with it are refused (401) from
// the moment this returns. Unknown name: CodeNotFound.
func (c *Client) KeysDelete(ctx context.Context, req *pb.KeysDeleteRequest) error {
	return c.do(ctx, "/v1/keys.delete", req, &v1.Reply{})
}
