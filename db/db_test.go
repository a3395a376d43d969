package db_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
)

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
	require.ErrorContains(t, err, "upgrade metalloc")

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
