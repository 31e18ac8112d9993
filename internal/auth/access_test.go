package auth_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
)

// TestAuthorizeNamesTheCall: one rule for every door, each refusal naming
// the call as its client made it (an SQS action by its name, /v1 by its
// path), whatever the refusal (scope, whole server, queue).
func TestAuthorizeNamesTheCall(t *testing.T) {
	p := &auth.Principal{Name: "w", Scopes: []auth.Scope{auth.Produce, auth.Dead}, Queues: []string{"orders*"}}
	send := auth.Access{Op: "/v1/queue.produce", Call: "SendMessage"}
	cases := []struct {
		name string
		a    auth.Access
		want string
	}{
		{"scope by action", auth.Access{Op: "/v1/queue.lease", Call: "ReceiveMessage"},
			"forbidden; key 'w' lacks scope 'consume', which ReceiveMessage needs"},
		{"queue by action", send.On("billing"),
			"forbidden; key 'w' has scope 'produce' only for queues 'orders*', not for 'billing', which SendMessage needs"},
		{"queue by path", auth.Access{Op: "/v1/redrives.cancel"}.On("billing-dead"),
			"forbidden; key 'w' has scope 'dead' only for queues 'orders*', not for 'billing-dead', which /v1/redrives.cancel needs"},
		{"the first queue not covered", auth.Access{Op: "/v1/dead.redrive"}.On("orders-dead", "", "billing", "x"),
			"forbidden; key 'w' has scope 'dead' only for queues 'orders*', not for 'billing', which /v1/dead.redrive needs"},
		{"whole server", auth.Access{Op: "/v1/keys.list"},
			"forbidden; key 'w' lacks scope 'admin', which /v1/keys.list needs"},
		{"no mapping needs admin", auth.Access{Op: "/v1/nothing", Call: "AddPermission"},
			"forbidden; key 'w' lacks scope 'admin', which AddPermission needs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := p.Authorize(c.a)
			require.EqualError(t, err, c.want)
			e, ok := apierr.As(err)
			require.True(t, ok)
			require.Equal(t, apierr.Forbidden, e.Code)
		})
	}
	require.NoError(t, p.Authorize(send.On("orders-eu")))
	require.Empty(t, send.Queues, "On does not change the Access it extends")

	ctx := context.Background()
	require.NoError(t, auth.Authorize(ctx, send.On("billing")), "no principal: no --auth")
	require.Error(t, auth.Authorize(auth.WithPrincipal(ctx, p), send.On("billing")))
	admin := &auth.Principal{Name: "a", Scopes: []auth.Scope{auth.Admin}, Queues: []string{"orders*"}}
	require.EqualError(t, admin.Authorize(auth.Access{Op: auth.PathMetrics}),
		"forbidden; key 'a' has scope 'read' only for queues 'orders*'; /metrics needs it for every queue")
}
