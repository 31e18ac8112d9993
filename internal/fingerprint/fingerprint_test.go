package fingerprint

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPattern(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"order 1234 not found", "order <n> not found"},
		{"charge card: card_declined (order 8812, amount 19.99 EUR)", "charge card: card_declined (order <n>, amount <n> EUR)"},
		{`POST https://payments.internal/v1/charges/ch_3NqLfe2eZvKYlo2C: 502 Bad Gateway`,
			"POST https://payments.internal/v<n>/charges/ch_<id>: <n> Bad Gateway"},
		{"dial tcp 10.0.3.17:5432: connect: connection refused", "dial tcp <ip>: connect: connection refused"},
		{"dial tcp [fd00::3]:5432: i/o timeout", "dial tcp <ip>: i/o timeout"},
		{"context deadline exceeded after 30.002s", "context deadline exceeded after <dur>"},
		{"lock wait 1m30s exceeded the 250ms budget", "lock wait <dur> exceeded the <dur> budget"},
		{"user 550e8400-e29b-41d4-a716-446655440000 has no address", "user <uuid> has no address"},
		{`customer "Ada Lovelace" has no default payment method`, "customer <str> has no default payment method"},
		{"can't parse 'x-17': invalid syntax", "can't parse <str>: invalid syntax"},
		{"token expired at 2024-05-01T10:22:33.123Z (now 2024-05-01 10:23:00+02:00)", "token expired at <time> (now <time>)"},
		{"job started 10:22:33 took too long", "job started <time> took too long"},
		{"segfault at 0x7ffd5c3e8a10 ip 0x00007f", "segfault at <hex> ip <hex>"},
		{"item 0dsr4b8l3q2c0 already leased by worker-7", "item <id> already leased by worker-<n>"},
		{"sha256 mismatch: want 9f86d081884c7d65, got deadbeefcafebabe", "sha<n> mismatch: want <id>, got <id>"},
		{"GET /orders/8812/lines/3: 404", "GET /orders/<n>/lines/<n>: <n>"},
		{"  pq: duplicate key value violates unique constraint \"orders_pkey\"\n\tDETAIL: Key (id)=(42) already exists. ",
			"pq: duplicate key value violates unique constraint <str> DETAIL: Key (id)=(<n>) already exists."},
		{"exit status 137", "exit status <n>"},
		{"temperature -3.5e2 out of range", "temperature -<n> out of range"},
		{"2fa required", "<n>fa required"},
		{"", ""},
		{"panic: runtime error: index out of range [5] with length 3", "panic: runtime error: index out of range [<n>] with length <n>"},
		{"résumé 12 invalide", "résumé <n> invalide"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			assert.Equal(t, tc.want, Pattern(tc.in))
		})
	}
}

// Errors of one shape share a fingerprint; errors of different shapes do
// not.
func TestOfGroupsByShape(t *testing.T) {
	same := [][]string{
		{"order 1234 not found", "order 98 not found", "order   7\tnot found"},
		{"dial tcp 10.0.3.17:5432: connect: connection refused", "dial tcp 192.168.1.2:6543: connect: connection refused"},
		{"payment ch_3NqLfe2eZvKYlo2C declined after 1.2s", "payment ch_9ZkQae7fTbWXpo1D declined after 950ms"},
		{`customer "Ada" not found (request 550e8400-e29b-41d4-a716-446655440000)`,
			`customer "Grace Hopper" not found (request 6ba7b810-9dad-11d1-80b4-00c04fd430c8)`},
	}
	seen := map[string]int{}
	for i, group := range same {
		fp := Of(group[0])
		require.True(t, Valid(fp), fp)
		for _, e := range group[1:] {
			assert.Equal(t, fp, Of(e), "%q and %q", group[0], e)
		}
		if j, ok := seen[fp]; ok {
			t.Fatalf("groups %d and %d share fingerprint %s", j, i, fp)
		}
		seen[fp] = i
	}
	assert.NotEqual(t, Of("order 1 not found"), Of("order 1 was cancelled"))
}

func TestOfStable(t *testing.T) {
	// The fingerprint is stored with dead items: it must not change
	// between versions unless the rules do (see the package comment).
	assert.Equal(t, "order <n> not found", Pattern("order 1 not found"))
	assert.Equal(t, OfPattern("order <n> not found"), Of("order 1 not found"))
	assert.Equal(t, "e3b0c44298fc1c14", OfPattern(""))
	assert.Equal(t, "f47c61810e193dcc", Of("order 1 not found"))
	assert.Len(t, Of("x"), Length)
}

func TestPatternBounded(t *testing.T) {
	long := strings.Repeat("é", MaxPatternBytes) // 2 bytes each
	p := Pattern(long)
	assert.LessOrEqual(t, len(p), MaxPatternBytes)
	assert.True(t, strings.HasPrefix(long, p))
}

func TestValid(t *testing.T) {
	assert.True(t, Valid("0123456789abcdef"))
	assert.False(t, Valid("0123456789ABCDEF"))
	assert.False(t, Valid("0123456789abcde"))
	assert.False(t, Valid("0123456789abcdeg"))
}

func BenchmarkOf(b *testing.B) {
	e := "charge card: card_declined (order 8812, customer 550e8400-e29b-41d4-a716-446655440000, after 1.2s at 10.0.3.17:5432)"
	for b.Loop() {
		Of(e)
	}
}
