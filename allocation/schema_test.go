package allocation

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/allocation/state"
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

// TestTransitionsMatchTheSchema: the Go transition tables
// (state.Transitions, state.GroupTransitions) allow exactly the moves the
// schema's triggers allow (allocations_state_guard,
// allocation_groups_state_guard): every pair of states is tried on a row in
// the first state, in a transaction rolled back, and the guard refuses it
// iff the table does not list it. (An allowed move may still be refused by
// another rule, such as an active allocation needing its node: only the
// guard's refusal counts.)
func TestTransitionsMatchTheSchema(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.node("n1", "gold")
	me := f.conductor("c")
	// A row in each state: allocating, active (reserved on n1), error.
	rows := map[State]int64{}
	rows[StateAllocating] = f.allocation(nil, "gold").ID
	active := f.allocation(nil, "gold").ID
	_, err := f.pool.Exec(ctx, `UPDATE allocations SET conductor_affinity = $1 WHERE id = $2`, me, active)
	require.NoError(t, err)
	require.True(t, f.reserve(active, me))
	rows[StateActive] = active
	failed := f.allocation(nil, "gold").ID
	_, err = f.pool.Exec(ctx, `UPDATE allocations SET state = 'error' WHERE id = $1`, failed)
	require.NoError(t, err)
	rows[StateError] = failed
	groups := map[State]int64{}
	for _, s := range state.All {
		var id int64
		require.NoError(t, f.pool.QueryRow(ctx, `INSERT INTO allocation_groups (uuid, count, resource_class, state)
			VALUES (gen_random_uuid(), 1, 'gold', $1) RETURNING id`, s).Scan(&id))
		groups[s] = id
	}
	try := func(table string, id int64, to State) error {
		tx, err := f.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `UPDATE `+table+` SET state = $1 WHERE id = $2`, to, id)
		return err
	}
	for _, from := range state.All {
		for _, to := range state.All {
			err := try("allocations", rows[from], to)
			guarded := err != nil && strings.Contains(err.Error(), "cannot move from")
			require.Equal(t, !canMove(state.Transitions, from, to), guarded,
				"allocation %s -> %s: %v", from, to, err)
			err = try("allocation_groups", groups[from], to)
			guarded = err != nil && strings.Contains(err.Error(), "cannot move from")
			require.Equal(t, !canMove(state.GroupTransitions, from, to), guarded,
				"allocation group %s -> %s: %v", from, to, err)
		}
	}
}

// canMove reports whether table allows from -> to (staying is always
// allowed: it is no move).
func canMove(table map[state.State][]state.State, from, to state.State) bool {
	return from == to || slices.Contains(table[from], to)
}
