package clusters

import (
	"context"

	"github.com/styxq/styx/internal/backend/postgres"
)

// SetMoveBatchHook has f called after each batch of every move r runs,
// with the move's context (tests: hold a move mid-copy).
func SetMoveBatchHook(r *Router, f func(context.Context, postgres.MoveProgress)) { r.moveBatch = f }
