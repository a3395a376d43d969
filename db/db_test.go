package db_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
)

// TestCheckSchema: the database's version against this binary's window:
// a newer migration without a recorded kind or a contract one is too new,
// an expand one is fine; a database missing expand migrations is outdated.
func TestCheckSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	require.NoError(t, db.CheckSchema(ctx, pool))

	latest, err := db.LatestVersion()
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, latest+1)
	require.NoError(t, err)
	err = db.CheckSchema(ctx, pool)
	require.True(t, errors.Is(err, db.ErrSchemaTooNew), err)
	require.ErrorContains(t, err, "has no recorded kind: upgrade metalloc to a binary that knows version")
	// Recorded as expand by the newer binary's db sync: inside the window.
	_, err = pool.Exec(ctx, `INSERT INTO schema_migration_kinds (version, kind) VALUES ($1, 'expand')`, latest+1)
	require.NoError(t, err)
	require.NoError(t, db.CheckSchema(ctx, pool))
	_, err = pool.Exec(ctx, `UPDATE schema_migration_kinds SET kind = 'contract' WHERE version = $1`, latest+1)
	require.NoError(t, err)
	require.ErrorIs(t, db.CheckSchema(ctx, pool), db.ErrSchemaTooNew)

	_, err = pool.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id > 0`)
	require.NoError(t, err)
	err = db.CheckSchema(ctx, pool)
	require.True(t, errors.Is(err, db.ErrSchemaOutdated), err)
	require.ErrorContains(t, err, "metalloc-manage db sync")

	_, err = pool.Exec(ctx, `DROP TABLE goose_db_version`)
	require.NoError(t, err)
	require.True(t, errors.Is(db.CheckSchema(ctx, pool), db.ErrSchemaOutdated))
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	v1, err := db.Migrate(context.Background(), url, nil)
	require.NoError(t, err)
	v2, err := db.Migrate(context.Background(), url, nil)
	require.NoError(t, err)
	require.Equal(t, v1, v2)
}

// The errors a failover produces are unavailable (503), query errors are not.
func TestIsUnavailableClassifiesFailoverErrors(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"25006": true, // read_only_sql_transaction: a standby, or a fenced primary
		"57P01": true, // admin_shutdown
		"57P02": true, // crash_shutdown
		"57P03": true, // cannot_connect_now: starting up, recovering
		"53300": true, // too_many_connections
		"08006": true, // connection_failure
		"23505": false, "40001": false, "42P01": false,
	} {
		err := fmt.Errorf("claiming: %w", &pgconn.PgError{Code: code})
		require.Equal(t, want, db.IsUnavailable(err), code)
	}
	for _, err := range []error{
		fmt.Errorf("dial: %w", syscall.ECONNREFUSED),
		fmt.Errorf("read: %w", syscall.ECONNRESET),
		io.ErrUnexpectedEOF,
		context.DeadlineExceeded,
	} {
		require.True(t, db.IsUnavailable(err), "%v", err)
	}
	require.False(t, db.IsUnavailable(nil))
	require.False(t, db.IsUnavailable(errors.New("no rows")))
}
