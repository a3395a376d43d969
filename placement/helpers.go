package placement

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/metalloc/metalloc/db"
)

// runTx runs f in one transaction on h's pool, committing when f returns nil.
func (h *Handler) runTx(ctx context.Context, f func(q *Queries) error) error {
	return db.InTx(ctx, h.pool, func(tx pgx.Tx) error { return f(h.q.WithTx(tx)) })
}

// isFKViolation tells a foreign-key violation (a referenced row deleted
// meanwhile, or a referencing row added meanwhile).
func isFKViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503"
}

// isUniqueViolation tells a unique-constraint violation.
func isUniqueViolation(err error) bool { return db.IsUniqueViolation(err, "") }

// contains tells whether list holds s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
