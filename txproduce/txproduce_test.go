package txproduce

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestCheckedBeforeTheStatement: the rules of the server refuse an item
// before any statement (tx is nil: never used), naming the field.
func TestCheckedBeforeTheStatement(t *testing.T) {
	for _, c := range []struct {
		items   []Item
		field   string
		message string
	}{
		{nil, "items", "invalid items; at least one is required"},
		{make([]Item, 1001), "items", "invalid items; 1001 given, the limit is 1000"},
		{[]Item{{}, {Payload: make([]byte, 5<<20+1)}}, "items[1].bytes", "invalid items[1].bytes; payload is 5242881 bytes, the limit is 5242880 (5 MB)"},
		{[]Item{{Encoding: strings.Repeat("e", 1025)}}, "items[0].encoding", "invalid items[0].encoding; 1025 bytes, the limit is 1024"},
		{[]Item{{Reference: "a\u200bb"}}, "items[0].reference", "U+200B at character 1"},
		{[]Item{{DeduplicationID: strings.Repeat("d", 129)}}, "items[0].deduplication_id", "invalid items[0].deduplication_id; 129 bytes, the limit is 128"},
		{[]Item{{Group: "a\tb"}}, "items[0].group", "invalid items[0].group; byte 1 (0x09) is not an ASCII letter, digit or punctuation"},
		{[]Item{{EnqueueAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}}, "items[0].enqueue_at", "invalid items[0].enqueue_at; 2300-01-01T00:00:00Z is out of range"},
	} {
		t.Run(c.field, func(t *testing.T) {
			_, err := Produce(t.Context(), nil, "q", c.items)
			require.ErrorIs(t, err, ErrInvalid)
			var ie *InvalidError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, c.field, ie.Field)
			require.Contains(t, ie.Message, c.message)
			require.False(t, ie.InTransaction)
		})
	}
}

// TestFromSQL: styx_produce's refusals become this package's errors, with
// PostgreSQL's error in their chain; others pass as they are.
func TestFromSQL(t *testing.T) {
	refused := &pgconn.PgError{Code: "22023", ColumnName: "items[2].kind", Message: "invalid items[2].kind; 2000 bytes, the limit is 1024"}
	err := fromSQL(fmt.Errorf("query: %w", refused))
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "items[2].kind", ie.Field)
	require.True(t, ie.InTransaction)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorAs(t, err, new(*pgconn.PgError))

	missing := &pgconn.PgError{Code: "P0001", TableName: "styx_queues", Message: "queue does not exist; no such queue named 'q'"}
	err = fromSQL(missing)
	require.ErrorIs(t, err, ErrQueueNotFound)
	require.EqualError(t, err, "txproduce: queue does not exist; no such queue named 'q'")

	other := &pgconn.PgError{Code: "42501", Message: "permission denied for function styx_produce"}
	require.Same(t, error(other), fromSQL(other))
	plain := errors.New("conn closed")
	require.Same(t, plain, fromSQL(plain))
}

func TestIDString(t *testing.T) {
	require.Equal(t, "0000000000002", ID(1).String())
}
