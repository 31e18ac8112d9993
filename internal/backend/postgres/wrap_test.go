package postgres

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/store"
)

// TestWrapClassifiesServerStates checks that the PostgreSQL errors of a
// server that cannot take writes now (down, shutting down, out of
// resources, read-only in a failover) are store.ErrUnavailable (453,
// retryable), and that others are not: a client sees a 500 only for what
// no retry can fix.
func TestWrapClassifiesServerStates(t *testing.T) {
	for code, unavailable := range map[string]bool{
		"08006": true,  // connection_failure
		"57P01": true,  // admin_shutdown
		"53300": true,  // too_many_connections
		"25006": true,  // read_only_sql_transaction: a standby, or one mid-promotion
		"42601": false, // syntax_error
		"25P02": false, // in_failed_sql_transaction
	} {
		err := wrap("op", &pgconn.PgError{Code: code, Message: "m"})
		require.Equal(t, unavailable, errors.Is(err, store.ErrUnavailable), "%s: %v", code, err)
	}
}
