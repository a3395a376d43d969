package placement

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Prepare readies the placement schema for serving at start-up (idempotent,
// safe with several processes starting at once): the standard traits are
// synced in (see traits.go). It is a no-op until traits exist.
func Prepare(ctx context.Context, pool *pgxpool.Pool) error {
	return syncStandardTraits(ctx, pool)
}
