package allocation

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestSchemaInvariants(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	n1 := f.node("n1", "gold")
	row := f.allocation(nil, "gold")
	// active without a node
	_, err := f.pool.Exec(ctx, `UPDATE allocations SET state = 'active' WHERE id = $1`, row.ID)
	require.Error(t, err)
	// a node-side link that the allocation does not mirror
	_, err = f.pool.Exec(ctx, `UPDATE nodes SET allocation_id = $1, instance_uuid = $2 WHERE id = $3`, row.ID, row.Uuid, n1)
	require.Error(t, err)
	// an allocation-side link that the node does not mirror
	_, err = f.pool.Exec(ctx, `UPDATE allocations SET node_id = $1, state = 'active' WHERE id = $2`, n1, row.ID)
	require.ErrorContains(t, err, "which does not hold it")
	// both sides, but the node's instance is another
	link := func(instance uuid.UUID) error {
		return pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE allocations SET node_id = $1, state = 'active' WHERE id = $2`, n1, row.ID); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE nodes SET allocation_id = $1, instance_uuid = $2 WHERE id = $3`, row.ID, instance, n1)
			return err
		})
	}
	require.ErrorContains(t, link(uuid.New()), "SQLSTATE 23000")
	// both sides naming each other: fine
	require.NoError(t, link(row.Uuid))
	_, err = f.pool.Exec(ctx, `UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL WHERE id = $1`, n1)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `DELETE FROM allocations WHERE id = $1`, row.ID)
	require.NoError(t, err)
	row = f.allocation(nil, "gold")
	// error is final
	_, err = f.pool.Exec(ctx, `UPDATE allocations SET state = 'error' WHERE id = $1`, row.ID)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE allocations SET state = 'allocating' WHERE id = $1`, row.ID)
	require.ErrorContains(t, err, "cannot move from error to allocating")
}
