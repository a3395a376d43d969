package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
)

// TestWarmUp: a pool with WarmUp runs metalloc_warm_up() on each new
// connection (the sequences its made-up rows used moved), which leaves
// nothing behind: no row, no notification, the queue's allocation and the
// free node as they were (a claim right after takes them).
func TestWarmUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	u := dbtest.NewURL(t)
	plain, err := db.Open(ctx, u, db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer plain.Close()
	dbtest.Nodes(t, plain, 1, "gold")
	allocID, _ := dbtest.Allocation(t, plain, dbtest.AllocationSpec{})

	listener, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer listener.Close(context.Background())
	for _, ch := range []string{"metalloc_allocations", "metalloc_allocation_events", "metalloc_nodes"} {
		_, err := listener.Exec(ctx, "LISTEN "+ch)
		require.NoError(t, err)
	}

	type counts struct{ nodes, allocs, events, changes, nodeSeq, allocSeq int64 }
	read := func() (c counts) {
		require.NoError(t, plain.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM nodes), (SELECT count(*) FROM allocations),
			       (SELECT count(*) FROM allocation_events), (SELECT count(*) FROM placement_node_changes),
			       (SELECT last_value FROM nodes_id_seq), (SELECT last_value FROM allocations_id_seq)`).
			Scan(&c.nodes, &c.allocs, &c.events, &c.changes, &c.nodeSeq, &c.allocSeq))
		return c
	}
	before := read()

	warm, err := db.Open(ctx, u, db.PoolOptions{MaxConns: 2, MinConns: 2, WarmUp: true})
	require.NoError(t, err)
	defer warm.Close()
	a, err := warm.Acquire(ctx)
	require.NoError(t, err)
	b, err := warm.Acquire(ctx)
	require.NoError(t, err)
	a.Release()
	b.Release()
	_, err = warm.Exec(ctx, "SELECT metalloc_warm_up()") // and again, on a warm one
	require.NoError(t, err)

	after := read()
	require.GreaterOrEqual(t, after.nodeSeq, before.nodeSeq+3, "each connection warmed up, and the call")
	require.GreaterOrEqual(t, after.allocSeq, before.allocSeq+3)
	after.nodeSeq, after.allocSeq = before.nodeSeq, before.allocSeq
	require.Equal(t, before, after, "nothing left behind")

	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	n, err := listener.WaitForNotification(wctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "notified: %+v", n)

	// The queue is untouched: the allocation is still there to claim,
	// and takes the node.
	me := dbtest.Conductor(t, plain, "c1", 0, true)
	var reserved bool
	require.NoError(t, plain.QueryRow(ctx, "SELECT out_reserved FROM metalloc_claim_reserve($1, 10) WHERE out_id = $2",
		me, allocID).Scan(&reserved))
	require.True(t, reserved)
}

// TestWarmUpDoesNotWaitForLocks: a warm-up whose inserts would wait for
// a table lock (DDL, LOCK TABLE) gives up after 100 ms, and the new
// connection is handed out all the same.
func TestWarmUpDoesNotWaitForLocks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	u := dbtest.NewURL(t)
	plain, err := db.Open(ctx, u, db.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	defer plain.Close()
	tx, err := plain.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // ends the lock
	_, err = tx.Exec(ctx, `LOCK TABLE allocations IN SHARE MODE`)
	require.NoError(t, err)

	// Bounded only so that a warm-up that waits fails the test instead of
	// hanging it: the lock is held until the test ends.
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	warm, err := db.Open(qctx, u, db.PoolOptions{MaxConns: 1, MinConns: 1, WarmUp: true})
	require.NoError(t, err)
	defer warm.Close()
	var one int
	require.NoError(t, warm.QueryRow(qctx, "SELECT 1").Scan(&one))
	_, err = warm.Exec(ctx, "SELECT metalloc_warm_up()")
	require.ErrorContains(t, err, "lock timeout")
}
