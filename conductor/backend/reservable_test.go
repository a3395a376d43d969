package backend

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/allocation"
)

// TestReserveSkipsReservableNodes: on-demand allocations never take a
// reservable node (leases, issue 43) unless its lessee is the allocation's
// owner (a lease started with on_start: lessee): an unowned allocation
// takes the one on-demand node and the next finds none; p1 takes the
// reservable node leased to it; p2 does not take the reservable node it
// owns (booked for leases, lessee nobody).
func TestReserveSkipsReservableNodes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.node("n0", "gold")
	for _, n := range []string{"r0", "r1", "r2"} {
		f.node(n, "gold")
	}
	_, err := f.pool.Exec(ctx, `UPDATE nodes SET reservable = true WHERE name LIKE 'r%'`)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE nodes SET lessee = 'p1' WHERE name = 'r0'`)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE nodes SET owner = 'p2' WHERE name = 'r1'`)
	require.NoError(t, err)
	alloc := func(owner *string) int64 {
		row, err := f.aq.CreateAllocation(ctx, allocation.CreateAllocationParams{
			Uuid: uuid.New(), ResourceClass: "gold", Owner: owner, Extra: []byte("{}"),
			State: allocation.StateAllocating, Traits: []string{},
		})
		require.NoError(t, err)
		return row.ID
	}
	p1, p2 := "p1", "p2"
	free1, free2, leased, owned := alloc(nil), alloc(nil), alloc(&p1), alloc(&p2)
	drain(t, NewDatabase(f.pool, zaptest.NewLogger(t)), f.conductor("c"))
	nodeName := func(id int64) string {
		v := f.get(id)
		if v.NodeUUID == nil {
			require.Equal(t, allocation.StateError, v.State)
			return ""
		}
		var name string
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT name FROM nodes WHERE uuid = $1`, *v.NodeUUID).Scan(&name))
		return name
	}
	require.Equal(t, "n0", nodeName(free1))
	require.Equal(t, "", nodeName(free2))
	require.Equal(t, "r0", nodeName(leased))
	require.Equal(t, "", nodeName(owned))
	// last_error says why the free nodes were not taken.
	require.Contains(t, *f.get(free2).LastError, "(no node fits: 4 of resource class gold, 3 available (3 of them reservable, for leases only))")
}
