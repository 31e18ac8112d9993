package styx_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/duh-rpc/duh-go/proto/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/styxq/styx"
	"github.com/styxq/styx/internal/errclass"
	pb "github.com/styxq/styx/styxpb"
)

// TestErrorReason: the client reads the reason of an error reply from
// details["reason"], and its helpers decide by it, whatever the message.
func TestErrorReason(t *testing.T) {
	var reply *v1.Reply
	contentType := "application/protobuf"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := proto.Marshal(reply)
		require.NoError(t, err)
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(int(reply.Code))
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: srv.URL})
	require.NoError(t, err)
	call := func(code int32, reason, msg string) error {
		reply = &v1.Reply{Code: code, Message: msg}
		if reason != "" {
			reply.Details = map[string]string{"reason": reason}
		}
		_, err := c.QueueLease(context.Background(), &pb.QueueLeaseRequest{QueueName: "q"})
		require.Error(t, err)
		return err
	}

	err = call(454, styx.ReasonRequestTimeout, "words that may change")
	var serr *styx.Error
	require.ErrorAs(t, err, &serr)
	assert.Equal(t, styx.ReasonRequestTimeout, serr.Reason)
	assert.Equal(t, "words that may change", serr.Message)
	assert.Equal(t, styx.ReasonRequestTimeout, styx.ErrorReason(err))
	assert.True(t, styx.IsNoItems(err))
	assert.True(t, styx.IsRetry(err))

	// Another 454, even with the message of an empty lease, is not one.
	err = call(454, styx.ReasonRetry, "request timeout; no items are in the queue, try again")
	assert.False(t, styx.IsNoItems(err))
	assert.True(t, styx.IsRetry(err))

	err = call(400, styx.ReasonQueueNotFound, "no such queue")
	assert.True(t, styx.IsQueueNotExist(err))
	assert.False(t, styx.IsQueueExists(err))
	err = call(400, styx.ReasonQueueExists, "queue does not exist; a message that lies")
	assert.True(t, styx.IsQueueExists(err))
	assert.False(t, styx.IsQueueNotExist(err), "decided by reason, not by message")

	// No reason: none of the helpers that need one holds.
	err = call(400, "", "queue does not exist; no such queue named 'q'")
	assert.Empty(t, styx.ErrorReason(err))
	assert.False(t, styx.IsQueueNotExist(err))

	// An answer that is no duh.v1.Reply (a proxy's) has no reason.
	contentType = "text/plain"
	err = call(502, "", "")
	assert.Equal(t, 502, styx.ErrorCode(err))
	assert.Empty(t, styx.ErrorReason(err))
	assert.Empty(t, styx.ErrorReason(context.Canceled))
}

// TestReasonConstants: the client's Reason… constants are the server's
// reasons (internal/errclass), one each.
func TestReasonConstants(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "client.go", nil, 0)
	require.NoError(t, err)
	var client []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if strings.HasPrefix(n.Name, "Reason") {
					v, err := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
					require.NoError(t, err)
					client = append(client, v)
				}
			}
		}
	}
	var server []string
	for _, r := range errclass.Reasons() {
		server = append(server, string(r))
	}
	slices.Sort(client)
	slices.Sort(server)
	assert.Equal(t, server, client)
}
