package conductor

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/conductor/backend"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement/client"
)

// A lease with the placement backend, in both modes (local: in-process on
// this database; http: through metalloc-placement's API), two conductors:
// at the start the booked nodes' lessee is the project and the lease's
// allocations (owned by the project, extra naming the lease) are claimed
// in Placement as the backend claims others (a Placement allocation and a
// claim log row each, on the lease's nodes); an admin's on-demand
// allocation meanwhile finds no node (all three are reservable: for leases
// only); at the end the allocations are gone from both, the lessee
// cleared, the rows released, and the nodes free in Placement again.
func TestLeaseWithPlacementBackend(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{backend.PlacementModeLocal, backend.PlacementModeHTTP} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := reservablePool(t, 3)
			pc := pbPlacement(t, pool, "gold")
			now := dbNow(t, pool)
			u := admitLease(t, pool, "lab", "allocate", 2, now.Add(2*time.Second), now.Add(6*time.Second))
			cfg := leaseCfg()
			cfg.Backend, cfg.Placement, cfg.PlacementMode = BackendPlacement, pc, mode
			startConductors(t, pool, cfg, 2)

			leased := `SELECT count(*) FROM leases l JOIN lease_nodes ln ON ln.lease_id = l.id
				  JOIN nodes n ON n.id = ln.node_id JOIN allocations a ON a.id = n.allocation_id
				 WHERE l.uuid = $1 AND a.owner = 'lab' AND a.state = 'active' AND n.lessee = 'lab'
				   AND a.extra->>'lease_uuid' = $1::text AND a.candidate_nodes = ARRAY[n.uuid]`
			dbtest.WaitFor(t, 30*time.Second, "the lease's 2 allocations active on its nodes", func() bool {
				return dbtest.Count(t, pool, leased, u) == 2
			})
			require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE uuid = $1 AND state = 'active'`, u))
			var allocs []uuid.UUID
			rows, err := pool.Query(ctx, `SELECT a.uuid, n.uuid FROM allocations a JOIN nodes n ON n.id = a.node_id`)
			require.NoError(t, err)
			nodeOf := map[uuid.UUID]uuid.UUID{}
			for rows.Next() {
				var a, n uuid.UUID
				require.NoError(t, rows.Scan(&a, &n))
				allocs = append(allocs, a)
				nodeOf[a] = n
			}
			require.NoError(t, rows.Err())
			require.Len(t, allocs, 2)
			for _, a := range allocs {
				held, err := pc.GetAllocations(ctx, a)
				require.NoError(t, err)
				require.Len(t, held.Allocations, 1, "allocation %s claimed in Placement", a)
				_, ok := held.Allocations[nodeOf[a]]
				require.True(t, ok, "allocation %s claimed in Placement on its node", a)
				require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM placement_claims
					WHERE consumer_uuid = $1 AND provider_uuid = $2`, a, nodeOf[a]))
			}

			// An admin's on-demand allocation: never a leased node.
			_, err = pool.Exec(ctx, `INSERT INTO allocations (uuid, resource_class) VALUES (gen_random_uuid(), 'gold')`)
			require.NoError(t, err)
			dbtest.WaitFor(t, 30*time.Second, "the on-demand allocation settled", func() bool {
				return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE owner IS NULL AND state <> 'allocating'`) == 1
			})
			require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocations a WHERE a.owner IS NULL
				AND a.state = 'error' AND a.node_id IS NULL`), "reservable nodes are for leases only")

			dbtest.WaitFor(t, 30*time.Second, "the lease ended", func() bool {
				return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE uuid = $1 AND state = 'ended'`, u) == 1
			})
			require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE owner = 'lab'`))
			require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE lessee IS NOT NULL OR allocation_id IS NOT NULL`))
			require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM lease_nodes WHERE NOT released`))
			for _, a := range allocs {
				held, err := pc.GetAllocations(ctx, a)
				require.NoError(t, err)
				require.Empty(t, held.Allocations, "allocation %s released in Placement", a)
			}
			require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM placement_claims WHERE consumer_uuid = ANY($1)`, allocs))
		})
	}
}

// leaseNodeTaken admits a lease of 2 gold nodes for project lab from 3 s
// from now for d, and has another consumer take its first node in
// Placement (pbPlacement) before the start; cfg is leaseCfg with the
// placement backend in mode local on that Placement.
func leaseNodeTaken(t *testing.T, pool *pgxpool.Pool, d time.Duration) (lease, taken uuid.UUID, cfg Config) {
	t.Helper()
	ctx := context.Background()
	pc := pbPlacement(t, pool, "gold")
	start := dbNow(t, pool).Add(3 * time.Second)
	lease = admitLease(t, pool, "lab", "allocate", 2, start, start.Add(d))
	require.NoError(t, pool.QueryRow(ctx, `SELECT n.uuid FROM lease_nodes ln JOIN nodes n ON n.id = ln.node_id
		ORDER BY n.id LIMIT 1`).Scan(&taken))
	require.NoError(t, pc.PutAllocations(ctx, uuid.New(), client.Claim{ProjectID: "p", UserID: "u",
		Request: client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{
			taken: {Resources: client.Resources{client.NormalizeClass("gold"): 1}}}}}))
	cfg = leaseCfg()
	cfg.Backend, cfg.Placement, cfg.PlacementMode = BackendPlacement, pc, backend.PlacementModeLocal
	return lease, taken, cfg
}

// A lease whose node another consumer has taken in Placement before the
// start, no other node free to replace it: that node's allocation ends in
// error with the reason (the other is active), the lease is flagged
// (leases_refused.go), and the end deletes the error allocation too
// (LeaseAllocationsWithoutNode), leaving no allocation of the lease
// behind.
func TestLeaseWithPlacementBackendNodeTaken(t *testing.T) {
	t.Parallel()
	pool := reservablePool(t, 2)
	u, taken, cfg := leaseNodeTaken(t, pool, 8*time.Second)
	startConductors(t, pool, cfg, 1)

	dbtest.WaitFor(t, 30*time.Second, "the lease's allocations settled", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE extra->>'lease_uuid' = $1::text
			AND state <> 'allocating'`, u) == 2
	})
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE extra->>'lease_uuid' = $1::text
		AND state = 'active'`, u))
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE extra->>'lease_uuid' = $1::text
		AND state = 'error' AND node_id IS NULL AND candidate_nodes = ARRAY[$2::uuid]`, u, taken))
	dbtest.WaitFor(t, 30*time.Second, "the lease flagged", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE uuid = $1
			AND degraded_reason LIKE '%refused by Placement not replaced%'`, u) == 1
	})

	dbtest.WaitFor(t, 30*time.Second, "the lease ended", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE uuid = $1 AND state = 'ended'`, u) == 1
	})
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations`))
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE lessee IS NOT NULL OR allocation_id IS NOT NULL`))
}

// The same with a third node free: the node taken in Placement is
// replaced within the start (leases_refused.go): the lease books the
// third node instead, whose allocation is claimed in Placement; the
// refused allocation is gone, the lease not flagged, one
// lease.node_replaced event says why.
func TestLeaseWithPlacementBackendTakenNodeReplaced(t *testing.T) {
	t.Parallel()
	pool := reservablePool(t, 3)
	u, taken, cfg := leaseNodeTaken(t, pool, time.Hour)
	startConductors(t, pool, cfg, 2)

	dbtest.WaitFor(t, 30*time.Second, "the lease's 2 allocations active on its nodes", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases l JOIN lease_nodes ln ON ln.lease_id = l.id
			  JOIN nodes n ON n.id = ln.node_id JOIN allocations a ON a.id = n.allocation_id
			 WHERE l.uuid = $1 AND a.owner = 'lab' AND a.state = 'active' AND n.lessee = 'lab'
			   AND a.extra->>'lease_uuid' = $1::text`, u) == 2
	})
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM lease_nodes ln JOIN nodes n ON n.id = ln.node_id
		WHERE n.uuid = $1`, taken), "the refused node left the lease")
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state <> 'active'`))
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE uuid = $1 AND lessee IS NOT NULL`, taken))
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE uuid = $1 AND state = 'active'
		AND degraded_reason IS NULL`, u))
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_events WHERE kind = $1
		AND allocation_uuid = $2 AND last_error LIKE '%(refused by Placement) replaced by%'`, EventLeaseNodeReplaced, u))
}
