package backend

import (
	"context"
	"fmt"
	"github.com/metalloc/metalloc/allocation"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement/client"
)

// TestPlacementModeAuto: mode auto claims in-process against a
// metalloc-placement on the same database, over HTTP against a Placement
// whose version document names no database (OpenStack Placement) or
// another one.
func TestPlacementModeAuto(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	ctx := context.Background()
	require.True(t, f.allocatorMode("c1", PlacementModeAuto).Local(ctx))
	require.True(t, f.allocatorMode("c1", "").Local(ctx))
	require.True(t, f.allocatorMode("c1", PlacementModeLocal).Local(ctx))
	require.False(t, f.allocatorMode("c1", PlacementModeHTTP).Local(ctx))
	for _, header := range []string{"", "0123456789abcdef0123456789abcdef"} {
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if header != "" {
				w.Header().Set("X-Metalloc-Database-Identity", header)
			}
			_, _ = w.Write([]byte(`{"versions": []}`))
		}))
		a := NewPlacement(f.pool, client.New(other.URL, "admin", time.Second), PlacementConfig{}, zaptest.NewLogger(t))
		require.False(t, a.Local(ctx))
		other.Close()
	}
	// Unreachable: HTTP for now, asked again later.
	a := NewPlacement(f.pool, client.New("http://127.0.0.1:1", "admin", time.Second), PlacementConfig{}, zaptest.NewLogger(t))
	require.False(t, a.Local(ctx))
	require.EqualValues(t, 0, a.mode.local.Load())
}

// TestPlacementLocalReserves: in-process claims, one by one (Process) and
// by batch (ClaimBatch), leave the allocation active on a node of its
// class and traits, the consumer in Placement with its project, the
// provider's generation bumped, and exactly the claim log entries of the
// active allocations.
func TestPlacementLocalReserves(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	ctx := context.Background()
	var fast []uuid.UUID
	for i := range 6 {
		if i%2 == 0 {
			fast = append(fast, f.pnode(fmt.Sprintf("gold-%d", i), "baremetal.gold", "CUSTOM_FAST"))
		} else {
			f.pnode(fmt.Sprintf("gold-%d", i), "baremetal.gold")
		}
	}
	me := f.conductor("c1")
	a := f.allocatorMode("c1", PlacementModeLocal)
	row := f.allocation(nil, "baremetal.gold", "CUSTOM_FAST")
	out, err := settle(ctx, a, me, f.claim(row.ID, me))
	require.NoError(t, err)
	require.Equal(t, Reserved, out)
	v := f.get(row.ID)
	require.Equal(t, allocation.StateActive, v.State)
	require.Contains(t, fast, *v.NodeUUID)
	p, err := f.pc.GetProvider(ctx, *v.NodeUUID)
	require.NoError(t, err)
	require.EqualValues(t, 3, p.Generation, "inventories, traits, then the claim")
	cur, err := f.pc.GetAllocations(ctx, v.Uuid)
	require.NoError(t, err)
	require.Equal(t, "metalloc", cur.ProjectID)
	require.EqualValues(t, 1, *cur.ConsumerGeneration)
	ids := []int64{row.ID}
	f.checkNoLeak(ids)

	// A batch: two more fast ones (the last two fast nodes), two of any
	// node, one that cannot fit (goes back for Process).
	var batch []Claimed
	for _, traits := range [][]string{{"CUSTOM_FAST"}, {"CUSTOM_FAST"}, nil, nil, {"CUSTOM_FAST"}} {
		r := f.allocation(nil, "baremetal.gold", traits...)
		ids = append(ids, r.ID)
		batch = append(batch, f.claim(r.ID, me))
	}
	reserved, rest := a.ClaimBatch(ctx, me, batch)
	require.Len(t, append(reserved, rest...), 5)
	require.GreaterOrEqual(t, len(reserved), 2)
	failed := 0
	for _, c := range rest {
		out, err = settle(ctx, a, me, c)
		require.NoError(t, err)
		if out == Failed {
			failed++
			require.Contains(t, *f.get(c.ID).LastError, "no node fits")
		}
	}
	require.GreaterOrEqual(t, failed, 1, "3 fast allocations for 2 fast nodes")
	f.checkNoLeak(ids)
	for i, id := range ids[1:] {
		if v := f.get(id); v.State == allocation.StateActive && i != 2 && i != 3 {
			require.Contains(t, fast, *v.NodeUUID)
		}
	}
}

// TestPlacementLocalRace has 4 conductors claim 60 allocations for 25
// nodes in-process, the fast path (ClaimReserveLocal), batches and Process
// racing, while another client
// writes allocations through the HTTP API on the same providers: no node
// is booked twice, every allocation ends active or in error, and
// Placement's usages are exactly the reserved nodes (plus the HTTP
// client's own consumers).
func TestPlacementLocalRace(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	nodes := f.goldNodes(25)
	var ids []int64
	for range 60 {
		ids = append(ids, f.allocation(nil, "gold").ID)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	var batched, fastN atomic.Int64
	// The two paths take turns for their first round (a batch, then the
	// fast path), then race: started together, one path could take every
	// node before the other's first claim, and the race would exercise
	// one path only.
	firstBatch, firstFast := make(chan struct{}), make(chan struct{})
	var batchOnce, fastOnce sync.Once
	for i := range 4 {
		name := fmt.Sprintf("c%d", i)
		me := f.conductor(name)
		a := f.allocatorMode(name, PlacementModeLocal)
		wg.Add(1)
		go func() {
			defer wg.Done()
			turn := func() {
				if i%2 == 0 {
					fastOnce.Do(func() { close(firstFast) })
				} else {
					batchOnce.Do(func() { close(firstBatch) })
					<-firstFast
				}
			}
			defer turn()
			if i%2 == 0 {
				<-firstBatch
			}
			for round := 0; ; round++ {
				if round == 1 {
					turn()
				}
				var claimed []Claimed
				if i%2 == 0 {
					// The fast path first (as the conductor does).
					got, left, err := a.ClaimReserveLocal(ctx, me, 4)
					require.NoError(t, err)
					if len(got)+len(left) == 0 {
						return
					}
					fastN.Add(int64(len(got)))
					claimed = left
				} else {
					claimed = claim(t, NewDatabase(f.pool, zaptest.NewLogger(t)), me, 4)
					if len(claimed) == 0 {
						return
					}
				}
				reserved, rest := a.ClaimBatch(ctx, me, claimed)
				batched.Add(int64(len(reserved)))
				for _, c := range rest {
					_, err := settle(ctx, a, me, c)
					require.NoError(t, err)
				}
			}
		}()
	}
	// An outside Placement client claims and frees the last node meanwhile.
	outsider := uuid.New()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			err := f.pc.PutAllocations(ctx, outsider, client.Claim{
				Request: client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{
					nodes[24]: {Resources: client.Resources{"CUSTOM_GOLD": 1}}}},
				ProjectID: "p", UserID: "u"})
			if err == nil {
				require.NoError(t, f.pc.DeleteAllocations(ctx, outsider))
			} else {
				require.True(t, client.IsConflict(err), "%v", err)
			}
		}
	}()
	wg.Wait()
	booked := map[uuid.UUID]bool{}
	for _, id := range ids {
		v := f.get(id)
		switch v.State {
		case allocation.StateActive:
			require.False(t, booked[*v.NodeUUID], "node %s booked twice", *v.NodeUUID)
			booked[*v.NodeUUID] = true
		case allocation.StateError:
			require.Regexp(t, `no node fits|alternates consumed by concurrent claims`, *v.LastError)
		default:
			t.Fatalf("allocation %d is %s", id, v.State)
		}
	}
	require.GreaterOrEqual(t, len(booked), 24)
	require.Positive(t, batched.Load(), "no allocation was reserved by a batch")
	require.Positive(t, fastN.Load(), "no allocation was reserved by the fast path")
	f.checkNoLeak(ids)
}

// TestPlacementClassAgrees: the database's name for a node class in
// Placement (metalloc_placement_class, used by the fast path of mode local)
// is client.NormalizeClass's.
func TestPlacementClassAgrees(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, rc := range []string{"gold", "baremetal.gold", "GPU-large", "a..b", "x_y", "__x__", "ünï-code", "",
		" sp ace ", "CUSTOM_FOO", "123", "a/b\\c"} {
		var got string
		require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT metalloc_placement_class($1)`, rc).Scan(&got))
		require.Equal(t, client.NormalizeClass(rc), got, "class %q", rc)
	}
}

// TestPlacementClaimReserveLocal: the fast path of mode local reserves, in
// one statement, the rows a free node's flat provider can take, on nodes
// both sides agree on (never an unmirrored node, a provider whose
// capacity is reserved or used by another consumer, or a node without
// the traits in Placement), writes the consumer (project = owner) and the
// claim log, and leaves the rest claimed for the general path: rows with
// candidate_nodes, a trait or a class Placement does not know, a consumer
// that exists.
// The general path then reserves or fails them with Placement's reasons.
func TestPlacementClaimReserveLocal(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	ctx := context.Background()
	var fast []uuid.UUID
	for i := range 3 {
		fast = append(fast, f.pnode(fmt.Sprintf("fast-%d", i), "gold", "CUSTOM_FAST"))
	}
	plain := f.pnode("plain", "gold")
	owned := f.pnode("owned", "gold")
	owned2 := f.pnode("owned2", "gold")
	_, err := f.pool.Exec(ctx, `UPDATE nodes SET owner = CASE WHEN uuid = $1 THEN 'proj-1' ELSE 'proj-2' END
		WHERE uuid IN ($1, $2)`, owned, owned2)
	require.NoError(t, err)
	// Nodes the fast path must pass over: no provider; a provider whose
	// inventory is all reserved; a provider an outside consumer uses; a
	// node with CUSTOM_FAST whose provider lacks it.
	f.node("unmirrored", "gold")
	reserved := f.pnode("reserved", "gold")
	_, err = f.pool.Exec(ctx, `UPDATE placement.inventories SET reserved = total
		WHERE resource_provider_id = (SELECT id FROM placement.resource_providers WHERE uuid = $1)`, reserved)
	require.NoError(t, err)
	used := f.pnode("used", "gold")
	outsider := uuid.New()
	require.NoError(t, f.pc.PutAllocations(ctx, outsider, client.Claim{
		Request: client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{
			used: {Resources: client.Resources{"CUSTOM_GOLD": 1}}}},
		ProjectID: "p", UserID: "u"}))
	notInPlacement := f.pnode("no-trait-in-placement", "gold")
	_, err = f.pool.Exec(ctx, `INSERT INTO node_traits (node_id, trait) SELECT id, 'CUSTOM_FAST' FROM nodes WHERE uuid = $1`, notInPlacement)
	require.NoError(t, err)

	var want, rest []int64
	for range 3 {
		want = append(want, f.allocation(nil, "gold", "CUSTOM_FAST").ID)
	}
	owner := "proj-1"
	r, err := f.aq.CreateAllocation(ctx, allocation.CreateAllocationParams{Uuid: uuid.New(), ResourceClass: "gold", Extra: []byte("{}"),
		Owner: &owner, State: allocation.StateAllocating, Traits: []string{}})
	require.NoError(t, err)
	want = append(want, r.ID)
	unknown := f.allocation(nil, "gold", "CUSTOM_UNKNOWN_TO_PLACEMENT").ID
	cands, err := f.aq.CreateAllocation(ctx, allocation.CreateAllocationParams{Uuid: uuid.New(), ResourceClass: "gold", Extra: []byte("{}"),
		CandidateNodes: []uuid.UUID{plain}, State: allocation.StateAllocating, Traits: []string{}})
	require.NoError(t, err)
	owner2 := "proj-2"
	exists, err := f.aq.CreateAllocation(ctx, allocation.CreateAllocationParams{Uuid: uuid.New(), ResourceClass: "gold", Extra: []byte("{}"),
		Owner: &owner2, State: allocation.StateAllocating, Traits: []string{}})
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `INSERT INTO placement.consumers (uuid, project_id, user_id, generation) VALUES ($1, 'p', 'u', 0)`, exists.Uuid)
	require.NoError(t, err)
	unknownClass := f.allocation(nil, "silver").ID
	rest = append(rest, unknown, cands.ID, exists.ID, unknownClass)

	me := f.conductor("c1")
	a := f.allocatorMode("c1", PlacementModeLocal)
	got, left, err := a.ClaimReserveLocal(ctx, me, 20)
	require.NoError(t, err)
	var gotIDs, leftIDs []int64
	for _, c := range got {
		gotIDs = append(gotIDs, c.ID)
	}
	for _, c := range left {
		leftIDs = append(leftIDs, c.ID)
		require.Equal(t, allocation.StateAllocating, f.get(c.ID).State)
	}
	require.ElementsMatch(t, want, gotIDs)
	require.ElementsMatch(t, rest, leftIDs)
	for _, id := range want[:3] {
		require.Contains(t, fast, *f.get(id).NodeUUID)
	}
	v := f.get(want[3])
	require.Equal(t, owned, *v.NodeUUID)
	cur, err := f.pc.GetAllocations(ctx, v.Uuid)
	require.NoError(t, err)
	require.Equal(t, "proj-1", cur.ProjectID)
	require.Equal(t, PlacementUserID, cur.UserID)
	require.EqualValues(t, 1, *cur.ConsumerGeneration)
	p, err := f.pc.GetProvider(ctx, owned)
	require.NoError(t, err)
	require.EqualValues(t, 2, p.Generation, "inventories, then the claim")
	require.NoError(t, f.pc.DeleteAllocations(ctx, outsider))
	f.checkNoLeak(append(slices.Clone(want), unknown, cands.ID))

	// The general path: candidate_nodes are reserved; the unknown trait
	// fails with Placement's reason; the existing consumer gets a node.
	outs := map[int64]Outcome{}
	reservedMore, rest2 := a.ClaimBatch(ctx, me, left)
	for _, c := range reservedMore {
		outs[c.ID] = Reserved
	}
	for _, c := range rest2 {
		out, err := settle(ctx, a, me, c)
		require.NoError(t, err)
		outs[c.ID] = out
	}
	require.Equal(t, Reserved, outs[cands.ID])
	require.Equal(t, plain, *f.get(cands.ID).NodeUUID)
	require.Equal(t, Failed, outs[unknown])
	require.Contains(t, *f.get(unknown).LastError, "CUSTOM_UNKNOWN_TO_PLACEMENT")
	require.Equal(t, Failed, outs[unknownClass])
	require.Contains(t, *f.get(unknownClass).LastError, "silver")
	require.Equal(t, Reserved, outs[exists.ID])
	require.Equal(t, owned2, *f.get(exists.ID).NodeUUID)
	f.checkNoLeak(append(slices.Clone(want), unknown, cands.ID, exists.ID, unknownClass))
}

// TestPlacementClaimPlanIgnoresStatistics: the in-process claim's reads of
// Placement do not grow with placement.allocations when a session planned
// it while the table was empty (a new fleet's first claims; PostgreSQL
// keeps the function's plans for the session): migration 00033. The same
// connection's claim with 9,000 allocations of other consumers on another
// provider reads about as many buffers as its first with none.
func TestPlacementClaimPlanIgnoresStatistics(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	ctx := context.Background()
	f.goldNodes(3)
	big := f.pnode("big", "silver")
	before, after := claimBuffersGrowth(t, f.fixture, "placement.allocations",
		`SELECT * FROM metalloc_claim_reserve_placement($1, 1, 'u', 'INSTANCE') WHERE out_reserved`, func() {
			_, err := f.pool.Exec(ctx, `
				WITH c AS (
					INSERT INTO placement.consumers (uuid, project_id, user_id, generation)
					SELECT gen_random_uuid(), 'p', 'u', 1 FROM generate_series(1, 9000) RETURNING id)
				INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
				SELECT rp.id, c.id, inv.resource_class_id, 1
				  FROM c, placement.resource_providers rp JOIN placement.inventories inv ON inv.resource_provider_id = rp.id
				 WHERE rp.uuid = $1`, big)
			require.NoError(t, err)
		})
	// The indexes one level deeper cost a few more (about 25); the whole
	// table read would cost about 150.
	require.Less(t, after, before+60, "buffers of a claim: %d with no other allocation, %d with 9,000", before, after)
}

// TestPlacementClaimWritesPlanIgnoresStatistics: the claim's writes of
// Placement's rows (the capacity re-read under the providers' locks, the
// generation bumps) do not read the whole inventories table when the
// session planned them while Placement had a few providers (a new fleet's
// first claims; the session keeps the plan): migration 00040. The same
// connection's claim with 10,000 more providers and inventories reads
// about as many buffers as its first with 4; before, 106 then 257 (a hash
// join over every inventory). A conductor whose connections planned the
// claim on empty tables read 3,469 buffers per batch of 8 in a burst on
// 10,000 nodes, against 362.
func TestPlacementClaimWritesPlanIgnoresStatistics(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	ctx := context.Background()
	f.goldNodes(3)
	f.pnode("silver-0", "silver")
	before, after := claimBuffersGrowth(t, f.fixture, "placement.inventories",
		`SELECT * FROM metalloc_claim_reserve_placement($1, 1, 'u', 'INSTANCE') WHERE out_reserved`, func() {
			_, err := f.pool.Exec(ctx, `
				WITH rp AS (
					INSERT INTO placement.resource_providers (uuid, name)
					SELECT gen_random_uuid(), 'many-' || i FROM generate_series(1, 10000) i RETURNING id)
				INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit)
				SELECT rp.id, (SELECT id FROM placement.resource_classes WHERE name = 'CUSTOM_SILVER'), 1, 1 FROM rp`)
			require.NoError(t, err)
		})
	require.Less(t, after, before+60, "buffers of a claim: %d with 4 providers, %d with 10,004", before, after)
}

// TestPlacementClaimSkipsInstanceLog checks migration 00041: the nodes the
// placement claim reserves are not logged for the resource tracker (their
// claims explain them), and an instance change later in the same
// transaction is: metalloc.placement_claimed is the claim function's own
// setting, restored when it returns.
func TestPlacementClaimSkipsInstanceLog(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	ctx := context.Background()
	gold := f.goldNodes(1)[0]
	silver := f.pnode("silver-0", "silver")
	_, err := f.pool.Exec(ctx, `INSERT INTO placement_trackers (id, hostname) VALUES (gen_random_uuid(), 'h')`)
	require.NoError(t, err)
	me := f.conductor("c1")
	f.allocation(nil, "gold")
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var reserved int
	require.NoError(t, tx.QueryRow(ctx,
		`SELECT count(*) FROM metalloc_claim_reserve_placement($1, 8, 'u', 'INSTANCE') WHERE out_reserved`, me).Scan(&reserved))
	require.Equal(t, 1, reserved)
	var setting string
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(current_setting('metalloc.placement_claimed', true), '')`).Scan(&setting))
	require.Empty(t, setting, "restored when the claim returned")
	_, err = tx.Exec(ctx, `UPDATE nodes SET instance_uuid = gen_random_uuid() WHERE uuid = $1`, silver)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	logged := func(node uuid.UUID) int {
		return dbtest.Count(t, f.pool, `SELECT count(*) FROM placement_node_changes WHERE node_uuid = $1`, node)
	}
	require.Equal(t, 0, logged(gold), "the claimed node")
	require.Equal(t, 1, logged(silver), "an instance without a claim, in the claim's transaction")
	require.Equal(t, 1, dbtest.Count(t, f.pool, `SELECT count(*) FROM nodes WHERE uuid = $1 AND instance_uuid IS NOT NULL`, gold))
}

// TestPlacementClaimVerifiesPicks checks migration 00042: the placement
// claim picks by metalloc's filters, verifies each pick against Placement
// under its provider's lock, and picks again for a row whose node
// Placement refuses. The free gold nodes with CUSTOM_FAST in metalloc are,
// in id order, one whose capacity is all reserved, one whose provider has
// a child, one whose provider lacks the trait, then the one Placement
// agrees with. Whatever node the pick starts from, every claim reserves
// the last one on the fast path, and the refused providers are left as
// they were (no allocation, same generation).
func TestPlacementClaimVerifiesPicks(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	ctx := context.Background()
	reserved := f.pnode("reserved", "gold", "CUSTOM_FAST")
	_, err := f.pool.Exec(ctx, `UPDATE placement.inventories SET reserved = total
		WHERE resource_provider_id = (SELECT id FROM placement.resource_providers WHERE uuid = $1)`, reserved)
	require.NoError(t, err)
	parent := f.pnode("parent", "gold", "CUSTOM_FAST")
	_, err = f.pool.Exec(ctx, `INSERT INTO placement.resource_providers (uuid, name, parent_provider_id, root_provider_id)
		SELECT gen_random_uuid(), 'child', id, id FROM placement.resource_providers WHERE uuid = $1`, parent)
	require.NoError(t, err)
	noTrait := f.pnode("no-trait-in-placement", "gold")
	_, err = f.pool.Exec(ctx, `INSERT INTO node_traits (node_id, trait) SELECT id, 'CUSTOM_FAST' FROM nodes WHERE uuid = $1`, noTrait)
	require.NoError(t, err)
	good := f.pnode("good", "gold", "CUSTOM_FAST")
	refused := []uuid.UUID{reserved, parent, noTrait}
	generations := func() []int64 {
		var g []int64
		for _, u := range refused {
			g = append(g, int64(dbtest.Count(t, f.pool, `SELECT generation FROM placement.resource_providers WHERE uuid = $1`, u)))
		}
		return g
	}
	before := generations()
	me := f.conductor("c1")
	a := f.allocatorMode("c1", PlacementModeLocal)
	for range 8 {
		id := f.allocation(nil, "gold", "CUSTOM_FAST").ID
		got, left, err := a.ClaimReserveLocal(ctx, me, 8)
		require.NoError(t, err)
		require.Empty(t, left)
		require.Len(t, got, 1)
		v := f.get(id)
		require.Equal(t, allocation.StateActive, v.State)
		require.Equal(t, good, *v.NodeUUID)
		for _, u := range refused {
			require.Equal(t, 0, dbtest.Count(t, f.pool, `SELECT count(*) FROM nodes WHERE uuid = $1 AND instance_uuid IS NOT NULL`, u))
			require.Equal(t, 0, dbtest.Count(t, f.pool, `SELECT count(*) FROM placement.allocations a
				JOIN placement.resource_providers p ON p.id = a.resource_provider_id WHERE p.uuid = $1`, u))
		}
		require.Equal(t, before, generations())
		f.checkNoLeak([]int64{id})
		_, err = f.pool.Exec(ctx, `SELECT metalloc_deallocate($1)`, id)
		require.NoError(t, err)
	}
}

// TestPlacementClaimWaitsForPlacementWriter checks migration 00042's
// verification against a Placement API writer that holds the only free
// node's provider: the claim waits for it (its first round locks the
// picks' providers, waiting), sees the allocation it committed, and
// leaves the row to the general path instead of allocating the provider
// twice.
func TestPlacementClaimWaitsForPlacementWriter(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	ctx := context.Background()
	node := f.goldNodes(1)[0]
	id := f.allocation(nil, "gold").ID
	me := f.conductor("c1")
	a := f.allocatorMode("c1", PlacementModeLocal)

	writer, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = writer.Rollback(ctx) }()
	var rp int64
	require.NoError(t, writer.QueryRow(ctx, `SELECT id FROM placement.resource_providers WHERE uuid = $1 FOR UPDATE`, node).Scan(&rp))
	outsider := uuid.New()
	_, err = writer.Exec(ctx, `
		WITH c AS (INSERT INTO placement.consumers (uuid, project_id, user_id, generation) VALUES ($1, 'p', 'u', 1) RETURNING id)
		INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
		SELECT $2, c.id, (SELECT id FROM placement.resource_classes WHERE name = 'CUSTOM_GOLD'), 1 FROM c`, outsider, rp)
	require.NoError(t, err)
	_, err = writer.Exec(ctx, `UPDATE placement.resource_providers SET generation = generation + 1 WHERE id = $1`, rp)
	require.NoError(t, err)

	type result struct {
		got, left []Claimed
		err       error
	}
	done := make(chan result, 1)
	go func() {
		got, left, err := a.ClaimReserveLocal(ctx, me, 8)
		done <- result{got, left, err}
	}()
	require.Eventually(t, func() bool {
		return dbtest.Count(t, f.pool, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	}, 10*time.Second, 5*time.Millisecond, "the claim waits for the writer's provider")
	require.NoError(t, writer.Commit(ctx))
	r := <-done
	require.NoError(t, r.err)
	require.Empty(t, r.got)
	require.Len(t, r.left, 1)
	require.Equal(t, id, r.left[0].ID)
	require.Equal(t, allocation.StateAllocating, f.get(id).State)
	require.Equal(t, 1, dbtest.Count(t, f.pool, `SELECT count(*) FROM placement.allocations WHERE resource_provider_id = $1`, rp),
		"the writer's allocation only")
	require.Equal(t, 0, dbtest.Count(t, f.pool, `SELECT count(*) FROM placement.consumers c JOIN allocations a ON a.uuid = c.uuid WHERE a.id = $1`, id))
}
