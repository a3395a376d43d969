package db_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
)

// TestUUIDEncoding: uuids go to the server as uuid values alone, by
// pointer (nil is NULL) and in arrays, and come back unchanged.
func TestUUIDEncoding(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	a, b := uuid.New(), uuid.New()
	var got uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, a).Scan(&got))
	require.Equal(t, a, got)
	var text string
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid::text`, a).Scan(&text))
	require.Equal(t, a.String(), text)
	var list []uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid[]`, []uuid.UUID{a, b}).Scan(&list))
	require.Equal(t, []uuid.UUID{a, b}, list)
	var isNull bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid IS NULL`, (*uuid.UUID)(nil)).Scan(&isNull))
	require.True(t, isNull)
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, &b).Scan(&got))
	require.Equal(t, b, got)
}
