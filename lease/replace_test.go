package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/lease"
	"github.com/metalloc/metalloc/node"
)

// repair runs lease.Repair on the lease named name in its own transaction.
func repair(t *testing.T, pool *pgxpool.Pool, name string) lease.RepairResult {
	t.Helper()
	ctx := context.Background()
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM leases WHERE name = $1`, name).Scan(&id))
	var res lease.RepairResult
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var ok bool
		var err error
		res, ok, err = lease.Repair(ctx, tx, id)
		if err == nil && !ok {
			err = errors.New("lease not pending")
		}
		return err
	}))
	return res
}

// setMaintenance puts node name in maintenance (on) or out of it.
func setMaintenance(t *testing.T, pool *pgxpool.Pool, name string, on bool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `UPDATE nodes SET maintenance = $2 WHERE name = $1`, name, on)
	require.NoError(t, err)
}

// bookedNames are the names of the nodes lease name books, in id order.
func bookedNames(t *testing.T, pool *pgxpool.Pool, name string) []string {
	t.Helper()
	return dbtest.Strings(t, pool, `
		SELECT n.name FROM lease_nodes ln JOIN leases l ON l.id = ln.lease_id JOIN nodes n ON n.id = ln.node_id
		 WHERE l.name = $1 AND NOT ln.released ORDER BY n.id`, name)
}

// noOverlaps: no node is in two overlapping blocking rows.
func noOverlaps(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Zero(t, dbtest.Count(t, pool, `
		SELECT count(*) FROM lease_nodes a JOIN lease_nodes b
		    ON a.node_id = b.node_id AND a.lease_id < b.lease_id AND a.during && b.during
		 WHERE NOT a.released AND NOT b.released`))
}

// TestRepair replaces a booked node in maintenance by the free node of the
// same rack (rule required: not one of the other rack), flags the lease
// when the rack has none left (the failed node kept, the reason in
// degraded_reason and the API's degraded fields), replaces it once a node
// of the rack is back (the flag cleared), and books a node for one deleted
// under the lease (its row gone with it).
func TestRepair(t *testing.T) {
	pool := fleet(t, 2, 3) // racks r01 (gpu-1..3), r02 (gpu-4..6)
	srv := server(t, pool)
	st, doc := do(t, srv, "POST", "/v1/leases", leaseBody("a", 1, 12, 2, `,"required":"rack"`))
	require.Equal(t, 201, st, "%v", doc)
	booked := bookedNames(t, pool, "a")
	require.Len(t, booked, 2)
	var rack, domain string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT extra->>'rack', (extra->>'row') || '/' || (extra->>'rack')
		  FROM nodes WHERE name = $1`, booked[0]).Scan(&rack, &domain))
	var spare string
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT name FROM nodes WHERE extra->>'rack' = $1 AND name <> ALL($2) `, rack, booked).Scan(&spare))

	// Nothing failed: nothing to do.
	res := repair(t, pool, "a")
	require.Empty(t, res.Replaced)
	require.False(t, res.Changed)

	// A node in maintenance: replaced by the spare of its rack.
	setMaintenance(t, pool, booked[0], true)
	res = repair(t, pool, "a")
	require.Len(t, res.Replaced, 1)
	require.Equal(t, lease.Replacement{Reservation: 1, Old: booked[0], OldNodeID: res.Replaced[0].OldNodeID,
		Why: lease.FailedMaintenance, New: spare, NewUUID: res.Replaced[0].NewUUID}, res.Replaced[0])
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE id = $1 AND name = $2`,
		res.Replaced[0].OldNodeID, booked[0]))
	require.Equal(t, fmt.Sprintf("reservation 1: node %s (in maintenance) replaced by %s", booked[0], spare), res.Replaced[0].String())
	require.False(t, res.Changed)
	require.Nil(t, res.Lease.DegradedReason)
	require.ElementsMatch(t, []string{booked[1], spare}, bookedNames(t, pool, "a"))

	// The spare fails too: the rack has no other free node (the other
	// rack's do not count under required); the lease is flagged.
	setMaintenance(t, pool, spare, true)
	res = repair(t, pool, "a")
	require.Empty(t, res.Replaced)
	require.True(t, res.Changed)
	require.NotNil(t, res.Lease.DegradedReason)
	require.Equal(t, fmt.Sprintf("reservation 1 (2 of gpu, in one rack): node %s in maintenance not replaced: "+
		"no other reservable node of gpu that fits is free in rack %s from %s to %s", spare, domain, at(1), at(12)),
		*res.Lease.DegradedReason)
	require.ElementsMatch(t, []string{booked[1], spare}, bookedNames(t, pool, "a"), "the failed node is kept")
	st, doc = do(t, srv, "GET", "/v1/leases/a", "")
	require.Equal(t, 200, st)
	require.Equal(t, true, doc["degraded"])
	require.Equal(t, *res.Lease.DegradedReason, doc["degraded_reason"])
	// Checked again: the same flag, no change.
	res = repair(t, pool, "a")
	require.False(t, res.Changed)

	// The first node is back: it replaces the spare; the flag goes.
	setMaintenance(t, pool, booked[0], false)
	res = repair(t, pool, "a")
	require.Len(t, res.Replaced, 1)
	require.Equal(t, booked[0], res.Replaced[0].New)
	require.True(t, res.Changed)
	require.Nil(t, res.Lease.DegradedReason)
	st, doc = do(t, srv, "GET", "/v1/leases/a", "")
	require.Equal(t, 200, st)
	require.Equal(t, false, doc["degraded"])
	require.Nil(t, doc["degraded_reason"])

	// A node deleted under the lease (as the Ironic mirror does; the API
	// refuses, TestDeleteBookedNodeRefused): the row is booked again.
	setMaintenance(t, pool, spare, false)
	_, err := pool.Exec(context.Background(), `DELETE FROM nodes WHERE name = $1`, booked[1])
	require.NoError(t, err)
	require.Len(t, bookedNames(t, pool, "a"), 1)
	res = repair(t, pool, "a")
	require.Len(t, res.Replaced, 1)
	require.Equal(t, "reservation 1: a deleted node replaced by "+spare, res.Replaced[0].String())
	require.ElementsMatch(t, []string{booked[0], spare}, bookedNames(t, pool, "a"))
	noOverlaps(t, pool)
}

// replaceRefused runs lease.ReplaceRefused on the lease named name, the
// nodes named refused refused by Ironic, in its own transaction.
func replaceRefused(t *testing.T, pool *pgxpool.Pool, name string, refused ...string) (lease.RepairResult, bool) {
	t.Helper()
	ctx := context.Background()
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM leases WHERE name = $1`, name).Scan(&id))
	var rs []lease.Refused
	for _, n := range refused {
		var nid int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM nodes WHERE name = $1`, n).Scan(&nid))
		rs = append(rs, lease.Refused{NodeID: nid, Why: "refused by Ironic"})
	}
	var res lease.RepairResult
	var ok bool
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		res, ok, err = lease.ReplaceRefused(ctx, tx, id, rs)
		return err
	}))
	return res, ok
}

// TestReplaceRefused: a node of an active lease refused at the start is
// replaced by a node of its rack that is free over the window and free
// now; while the rack's spare is not free now (provisioned), the lease is
// flagged and keeps the node; a pending lease is left to Repair.
func TestReplaceRefused(t *testing.T) {
	pool := fleet(t, 2, 3)
	srv := server(t, pool)
	st, doc := do(t, srv, "POST", "/v1/leases", leaseBody("a", 1, 12, 2, `,"required":"rack"`))
	require.Equal(t, 201, st, "%v", doc)
	booked := bookedNames(t, pool, "a")
	var domain, spare string
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT (extra->>'row') || '/' || (extra->>'rack') FROM nodes WHERE name = $1`, booked[0]).Scan(&domain))
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT name FROM nodes WHERE (extra->>'row') || '/' || (extra->>'rack') = $1 AND name <> ALL($2)`, domain, booked).Scan(&spare))

	_, ok := replaceRefused(t, pool, "a", booked[0])
	require.False(t, ok, "a pending lease is Repair's")
	_, err := pool.Exec(context.Background(), `UPDATE leases SET state = 'active' WHERE name = 'a'`)
	require.NoError(t, err)

	// The spare is taken now: nothing fits; flagged.
	_, err = pool.Exec(context.Background(), `UPDATE nodes SET provision_state = 'active' WHERE name = $1`, spare)
	require.NoError(t, err)
	res, ok := replaceRefused(t, pool, "a", booked[0])
	require.True(t, ok)
	require.Empty(t, res.Replaced)
	require.True(t, res.Changed)
	require.Equal(t, fmt.Sprintf("reservation 1 (2 of gpu, in one rack): node %s refused by Ironic not replaced: "+
		"no other reservable node of gpu that fits is free in rack %s from %s to %s", booked[0], domain, at(1), at(12)),
		*res.Lease.DegradedReason)
	require.Equal(t, booked, bookedNames(t, pool, "a"))

	// Free again: it replaces the refused node; the flag goes.
	_, err = pool.Exec(context.Background(), `UPDATE nodes SET provision_state = 'available' WHERE name = $1`, spare)
	require.NoError(t, err)
	res, ok = replaceRefused(t, pool, "a", booked[0])
	require.True(t, ok)
	require.Len(t, res.Replaced, 1)
	require.Equal(t, fmt.Sprintf("reservation 1: node %s (refused by Ironic) replaced by %s", booked[0], spare), res.Replaced[0].String())
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE id = $1 AND name = $2`,
		res.Replaced[0].OldNodeID, booked[0]))
	require.True(t, res.Changed)
	require.Nil(t, res.Lease.DegradedReason)
	require.ElementsMatch(t, []string{booked[1], spare}, bookedNames(t, pool, "a"))
	noOverlaps(t, pool)

	// A node the lease no longer books: nothing to do.
	res, ok = replaceRefused(t, pool, "a", booked[0])
	require.True(t, ok)
	require.Empty(t, res.Replaced)
	require.False(t, res.Changed)
}

// TestRepairRace: four leases of one node each over one window in a rack
// of six, their nodes all in maintenance, repaired concurrently while two
// admissions of one node in the rack race them for the two free nodes:
// the exclusion constraint lets each free node go once (no overlapping
// rows), so exactly two of the six get one; the other repairs flag their
// lease and the other admissions are refused (409).
func TestRepairRace(t *testing.T) {
	pool := fleet(t, 1, 6)
	srv := server(t, pool)
	for i := range 4 {
		st, doc := do(t, srv, "POST", "/v1/leases", leaseBody(fmt.Sprintf("l%d", i), 1, 12, 1, `,"required":"rack"`))
		require.Equal(t, 201, st, "%v", doc)
		for _, n := range bookedNames(t, pool, fmt.Sprintf("l%d", i)) {
			setMaintenance(t, pool, n, true)
		}
	}
	var wg sync.WaitGroup
	replaced := make([]bool, 4)
	admitted := make([]int, 2)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replaced[i] = len(repair(t, pool, fmt.Sprintf("l%d", i)).Replaced) == 1
		}()
	}
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			admitted[i], _ = do(t, srv, "POST", "/v1/leases", leaseBody(fmt.Sprintf("new%d", i), 3, 6, 1, `,"required":"rack"`))
		}()
	}
	wg.Wait()
	won := 0
	for i, r := range replaced {
		if r {
			won++
		} else {
			require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE name = $1 AND degraded_reason IS NOT NULL`,
				fmt.Sprintf("l%d", i)))
		}
	}
	for _, st := range admitted {
		require.Contains(t, []int{201, 409}, st)
		if st == 201 {
			won++
		}
	}
	require.Equal(t, 2, won, "replacements %v, admissions %v", replaced, admitted)
	noOverlaps(t, pool)
}

// TestDeleteBookedNodeRefused: a node a pending lease books is not
// deleted (409 naming the lease, as Ironic refuses a node with an
// allocation); once the lease is cancelled it may go.
func TestDeleteBookedNodeRefused(t *testing.T) {
	pool := fleet(t, 1, 3)
	srv := server(t, pool)
	st, doc := do(t, srv, "POST", "/v1/leases", leaseBody("a", 1, 12, 1, ""))
	require.Equal(t, 201, st, "%v", doc)
	booked := bookedNames(t, pool, "a")
	store := node.NewStore(pool)
	err := store.Delete(context.Background(), booked[0], nil)
	var nerr *node.Error
	require.ErrorAs(t, err, &nerr)
	require.Equal(t, node.KindConflict, nerr.Kind)
	require.Contains(t, nerr.Message, fmt.Sprintf("is booked by pending lease a (%s) of project p1 from %s to %s; put the node in maintenance",
		doc["uuid"], at(1), at(12)))
	st, _ = do(t, srv, "POST", "/v1/leases/a/cancel", "")
	require.Equal(t, 200, st)
	require.NoError(t, store.Delete(context.Background(), booked[0], nil))
}
