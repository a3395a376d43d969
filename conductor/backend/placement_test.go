package backend

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/placement/placementtest"
	"github.com/metalloc/metalloc/scheduler"
)

// pfixture is a fixture with an in-process metalloc-placement on the same
// database (its own schema).
type pfixture struct {
	*fixture
	pc *client.Client
}

func psetup(t *testing.T) *pfixture {
	t.Helper()
	f := setup(t)
	srv := placementtest.NewServerOn(t, f.pool, placement.Options{})
	return &pfixture{fixture: f, pc: client.New(srv.URL, "admin", 10*time.Second)}
}

// pnode adds an available node and its provider (as the tracker would:
// uuid = node uuid, CUSTOM_<RC> total 1, the node's traits).
func (f *pfixture) pnode(name, rc string, traits ...string) uuid.UUID {
	f.t.Helper()
	return f.mirror(f.node(name, rc, traits...), name, rc, traits...)
}

// mirror creates the provider of node id (named name, of class rc, with
// traits) as the tracker would, and returns the node's uuid.
func (f *pfixture) mirror(id int64, name, rc string, traits ...string) uuid.UUID {
	f.t.Helper()
	ctx := context.Background()
	var u uuid.UUID
	require.NoError(f.t, f.pool.QueryRow(ctx, `SELECT uuid FROM nodes WHERE id = $1`, id).Scan(&u))
	p, err := f.pc.CreateProvider(ctx, u, name)
	require.NoError(f.t, err)
	class := client.NormalizeClass(rc)
	require.NoError(f.t, f.pc.EnsureResourceClass(ctx, class))
	gen, err := f.pc.PutInventories(ctx, u, client.Inventories{Generation: p.Generation, Inventories: map[string]client.Inventory{
		class: {Total: 1, MinUnit: 1, MaxUnit: 1, StepSize: 1, AllocationRatio: 1},
	}})
	require.NoError(f.t, err)
	if len(traits) > 0 {
		for _, tr := range traits {
			require.NoError(f.t, f.pc.EnsureTrait(ctx, tr))
		}
		_, err = f.pc.PutTraits(ctx, u, gen, traits)
		require.NoError(f.t, err)
	}
	return u
}

// goldNodes enrols n "gold" nodes, gold-0 … gold-<n-1>, each mirrored as a
// provider, and returns their uuids in that order.
func (f *pfixture) goldNodes(n int) []uuid.UUID {
	f.t.Helper()
	all := make([]uuid.UUID, n)
	for i := range n {
		all[i] = f.pnode(fmt.Sprintf("gold-%d", i), "gold")
	}
	return all
}

// allocator is a Placement claiming over HTTP (mode http).
func (f *pfixture) allocator(host string) *Placement {
	return f.allocatorMode(host, PlacementModeHTTP)
}

func (f *pfixture) allocatorMode(host, mode string) *Placement {
	return NewPlacement(f.pool, f.pc, PlacementConfig{Hostname: host, Mode: mode}, zaptest.NewLogger(f.t))
}

// claim makes conductor me own allocation id.
func (f *pfixture) claim(id, me int64) Claimed {
	f.t.Helper()
	_, err := f.pool.Exec(context.Background(), `UPDATE allocations SET conductor_affinity = $2 WHERE id = $1`, id, me)
	require.NoError(f.t, err)
	rows, err := Read(context.Background(), f.pool, me, []int64{id})
	require.NoError(f.t, err)
	require.Len(f.t, rows, 1)
	return rows[0]
}

// checkNoLeak checks that Placement holds exactly the active allocations:
// every provider's usage is 1 iff its node holds an active allocation whose
// consumer is on it, every other consumer has no allocation, and the claim
// log lists only active allocations on their nodes.
func (f *pfixture) checkNoLeak(ids []int64) {
	f.t.Helper()
	ctx := context.Background()
	active := map[uuid.UUID]uuid.UUID{} // node -> allocation uuid
	for _, id := range ids {
		v := f.get(id)
		cur, err := f.pc.GetAllocations(ctx, v.Uuid)
		require.NoError(f.t, err)
		if v.State == allocation.StateActive {
			require.NotNil(f.t, v.NodeUUID)
			require.Len(f.t, cur.Allocations, 1, "allocation %s", v.Uuid)
			_, ok := cur.Allocations[*v.NodeUUID]
			require.True(f.t, ok, "allocation %s is active on %s but claimed elsewhere in Placement", v.Uuid, *v.NodeUUID)
			active[*v.NodeUUID] = v.Uuid
		} else {
			require.Empty(f.t, cur.Allocations, "allocation %s (%s) leaks in Placement", v.Uuid, v.State)
		}
	}
	rows, err := f.pool.Query(ctx, `SELECT uuid FROM nodes`)
	require.NoError(f.t, err)
	var nodes []uuid.UUID
	for rows.Next() {
		var u uuid.UUID
		require.NoError(f.t, rows.Scan(&u))
		nodes = append(nodes, u)
	}
	require.NoError(f.t, rows.Err())
	for _, n := range nodes {
		u, err := f.pc.ProviderUsages(ctx, n)
		if client.IsNotFound(err) {
			continue // not mirrored
		}
		require.NoError(f.t, err)
		var sum int64
		for _, v := range u.Usages {
			sum += v
		}
		if _, ok := active[n]; ok {
			require.EqualValues(f.t, 1, sum, "node %s", n)
		} else {
			require.Zero(f.t, sum, "node %s used in Placement without an active allocation", n)
		}
	}
	claims, err := f.pool.Query(ctx, `SELECT consumer_uuid, provider_uuid FROM placement_claims`)
	require.NoError(f.t, err)
	logged := map[uuid.UUID]uuid.UUID{}
	for claims.Next() {
		var c, p uuid.UUID
		require.NoError(f.t, claims.Scan(&c, &p))
		logged[p] = c
	}
	require.NoError(f.t, claims.Err())
	require.Equal(f.t, active, logged)
}

func TestPlacementProcessReserves(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	var fast, slow []uuid.UUID
	for i := range 4 {
		if i%2 == 0 {
			fast = append(fast, f.pnode(fmt.Sprintf("gold-%d", i), "baremetal.gold", "CUSTOM_FAST"))
		} else {
			slow = append(slow, f.pnode(fmt.Sprintf("gold-%d", i), "baremetal.gold"))
		}
	}
	me := f.conductor("c1")
	a := f.allocator("c1")
	row := f.allocation(nil, "baremetal.gold", "CUSTOM_FAST")
	out, err := settle(context.Background(), a, me, f.claim(row.ID, me))
	require.NoError(t, err)
	require.Equal(t, Reserved, out)
	v := f.get(row.ID)
	require.Equal(t, allocation.StateActive, v.State)
	require.Contains(t, fast, *v.NodeUUID)
	var info string
	require.NoError(t, f.pool.QueryRow(context.Background(),
		`SELECT instance_info->>'traits' FROM nodes WHERE uuid = $1 AND instance_uuid = $2 AND allocation_id = $3`,
		*v.NodeUUID, v.Uuid, row.ID).Scan(&info))
	require.JSONEq(t, `["CUSTOM_FAST"]`, info)
	cur, err := f.pc.GetAllocations(context.Background(), v.Uuid)
	require.NoError(t, err)
	require.Equal(t, "metalloc", cur.ProjectID)
	require.Equal(t, "metalloc", cur.UserID)
	f.checkNoLeak([]int64{row.ID})

	// The owner is the consumer's project, and only nodes it owns or
	// leases fit.
	owner := "tenant-a"
	_, err = f.pool.Exec(context.Background(), `UPDATE nodes SET lessee = $1 WHERE uuid = $2`, owner, slow[1])
	require.NoError(t, err)
	r2, err := f.aq.CreateAllocation(context.Background(), allocation.CreateAllocationParams{Uuid: uuid.New(), ResourceClass: "baremetal.gold",
		Extra: []byte("{}"), State: allocation.StateAllocating, Traits: []string{}, Owner: &owner})
	require.NoError(t, err)
	out, err = settle(context.Background(), a, me, f.claim(r2.ID, me))
	require.NoError(t, err)
	require.Equal(t, Reserved, out)
	v2 := f.get(r2.ID)
	require.Equal(t, slow[1], *v2.NodeUUID)
	cur, err = f.pc.GetAllocations(context.Background(), v2.Uuid)
	require.NoError(t, err)
	require.Equal(t, owner, cur.ProjectID)
	f.checkNoLeak([]int64{row.ID, r2.ID})
}

func TestPlacementProcessNoFit(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	f.pnode("gold-0", "gold", "CUSTOM_FAST")
	f.pnode("silver-0", "silver")
	me := f.conductor("c1")
	a := f.allocator("c1")
	ctx := context.Background()
	var ids []int64
	for _, tc := range []struct {
		rc     string
		traits []string
		msg    string
	}{
		{"gold", []string{"CUSTOM_NOPE"}, "no suitable nodes have the requested traits CUSTOM_NOPE. (no node fits: 1 of resource class gold, 1 available, 0 with traits CUSTOM_NOPE)"},
		{"bronze", nil, "no available nodes match the resource class bronze. (no node fits: 0 of resource class bronze"},
		{"gold", []string{"CUSTOM_FAST"}, ""},
		{"gold", nil, "no available nodes match the resource class gold. (no node fits: 1 of resource class gold, 0 available; not available: 1 holds an allocation or instance)"},
	} {
		row := f.allocation(nil, tc.rc, tc.traits...)
		ids = append(ids, row.ID)
		out, err := settle(ctx, a, me, f.claim(row.ID, me))
		require.NoError(t, err)
		v := f.get(row.ID)
		if tc.msg == "" {
			require.Equal(t, Reserved, out)
			continue
		}
		require.Equal(t, Failed, out)
		require.Equal(t, allocation.StateError, v.State)
		require.Contains(t, *v.LastError, tc.msg)
	}
	f.checkNoLeak(ids)

	// A node the database has but Placement does not offer (the tracker
	// has not mirrored it yet).
	f.node("silver-1", "silver")
	_, err := f.pool.Exec(ctx, `UPDATE nodes SET maintenance = true WHERE name = 'silver-0'`)
	require.NoError(t, err)
	row := f.allocation(nil, "silver")
	ids = append(ids, row.ID)
	out, err := settle(ctx, a, me, f.claim(row.ID, me))
	require.NoError(t, err)
	require.Equal(t, Failed, out)
	require.Contains(t, *f.get(row.ID).LastError, "all nodes were filtered out during reservation. (no node fits in Placement: ")
	require.Contains(t, *f.get(row.ID).LastError, "the database has 1 fitting node(s) that Placement does not offer")
	f.checkNoLeak(ids)
}

// TestPlacementProcessWaitsForMirror: an allocation whose only fitting node
// Placement does not offer yet (enrolled a moment ago, not mirrored by the
// tracker) waits for it without a worker (Waiting, as for locked nodes,
// the rows of its kind together), then reserves it once it is mirrored,
// in both modes.
func TestPlacementProcessWaitsForMirror(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{PlacementModeHTTP, PlacementModeLocal} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := psetup(t)
			ctx := context.Background()
			me := f.conductor("c1")
			a := f.allocatorMode("c1", mode)
			id := f.node("bronze-0", "bronze")
			row := f.allocation(nil, "bronze")
			other := f.allocation(nil, "bronze")
			c, o := f.claim(row.ID, me), f.claim(other.ID, me)

			out, err := a.Process(ctx, me, &c)
			require.NoError(t, err)
			require.Equal(t, Waiting, out)
			require.True(t, c.Wait.Waiting())
			require.Positive(t, c.Wait.Retry)
			require.LessOrEqual(t, c.Wait.Retry, a.lockedWait)
			out, err = a.Process(ctx, me, &o)
			require.NoError(t, err)
			require.Equal(t, Waiting, out, "a row of the same kind waits too")
			require.Equal(t, allocation.StateAllocating, f.get(row.ID).State)

			node := f.mirror(id, "bronze-0", "bronze")
			out, err = settle(ctx, a, me, c)
			require.NoError(t, err)
			require.Equal(t, Reserved, out)
			v := f.get(row.ID)
			require.Equal(t, allocation.StateActive, v.State)
			require.Equal(t, node, *v.NodeUUID)
			// The other row has nothing left: it ends in error once it
			// has waited locked_node_wait, saying why.
			out, err = settle(ctx, a, me, o)
			require.NoError(t, err)
			require.Equal(t, Failed, out)
			require.Equal(t, allocation.StateError, f.get(other.ID).State)
			f.checkNoLeak([]int64{row.ID, other.ID})
		})
	}
}

// TestPlacementProcessRace has 20 allocations race for 5 nodes through 4
// conductors: every allocation ends active on a node of its own or in error
// with a clear reason, and Placement holds exactly the active ones.
func TestPlacementProcessRace(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	f.goldNodes(5)
	var ids []int64
	for range 20 {
		ids = append(ids, f.allocation(nil, "gold").ID)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		name := fmt.Sprintf("c%d", i)
		me := f.conductor(name)
		a := f.allocator(name)
		claimed := claim(t, NewDatabase(f.pool, zaptest.NewLogger(t)), me, 5)
		for _, c := range claimed {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := settle(context.Background(), a, me, c)
				require.NoError(t, err)
			}()
		}
	}
	wg.Wait()
	nodes := map[uuid.UUID]bool{}
	var active int
	for _, id := range ids {
		v := f.get(id)
		switch v.State {
		case allocation.StateActive:
			active++
			require.False(t, nodes[*v.NodeUUID], "node %s booked twice", *v.NodeUUID)
			nodes[*v.NodeUUID] = true
		case allocation.StateError:
			require.NotNil(t, v.LastError)
			require.Regexp(t, `no node fits|alternates consumed by concurrent claims`, *v.LastError)
		default:
			t.Fatalf("allocation %d is %s", id, v.State)
		}
	}
	require.Equal(t, 5, active)
	f.checkNoLeak(ids)
}

// hookFilter runs hook with the candidates the real filter keeps.
type hookFilter struct {
	real scheduler.NodeFilter
	hook func(nodes []uuid.UUID)
}

func (h hookFilter) FitNodes(ctx context.Context, spec scheduler.RequestSpec, nodes []uuid.UUID) ([]uuid.UUID, error) {
	fit, err := h.real.FitNodes(ctx, spec, nodes)
	if err == nil {
		h.hook(fit)
	}
	return fit, err
}

// TestPlacementProcessAlternates pre-claims nodes in Placement behind the
// allocator's back, after it got its candidates: it falls back to the
// alternates, then asks again.
func TestPlacementProcessAlternates(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	all := f.goldNodes(6)
	free := all[5]
	ctx := context.Background()
	me := f.conductor("c1")
	a := f.allocator("c1")
	var stolen []uuid.UUID
	real := a.Scheduler().Filter
	a.Scheduler().Filter = hookFilter{real: real, hook: func(nodes []uuid.UUID) {
		// Someone else claims every offered node but one, except in the
		// last round.
		for _, n := range nodes {
			if n == free {
				continue
			}
			consumer := uuid.New()
			err := f.pc.PutAllocations(ctx, consumer, client.Claim{ProjectID: "p", UserID: "u",
				Request: client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{
					n: {Resources: client.Resources{"CUSTOM_GOLD": 1}}}}})
			require.NoError(t, err)
			stolen = append(stolen, consumer)
		}
	}}
	row := f.allocation(nil, "gold")
	out, err := settle(ctx, a, me, f.claim(row.ID, me))
	require.NoError(t, err)
	require.Equal(t, Reserved, out)
	require.Equal(t, free, *f.get(row.ID).NodeUUID)
	for _, c := range stolen {
		require.NoError(t, f.pc.DeleteAllocations(ctx, c))
	}
	f.checkNoLeak([]int64{row.ID})

	// Everything is taken behind its back, every time: the alternates
	// are consumed and the allocation fails, leaving nothing behind.
	a.Scheduler().Filter = hookFilter{real: real, hook: func(nodes []uuid.UUID) {
		for _, n := range nodes {
			consumer := uuid.New()
			err := f.pc.PutAllocations(ctx, consumer, client.Claim{ProjectID: "p", UserID: "u",
				Request: client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{
					n: {Resources: client.Resources{"CUSTOM_GOLD": 1}}}}})
			require.NoError(t, err)
			stolen = append(stolen, consumer)
		}
	}}
	stolen = nil
	row2 := f.allocation(nil, "gold")
	out, err = settle(ctx, a, me, f.claim(row2.ID, me))
	require.NoError(t, err)
	require.Equal(t, Failed, out)
	require.Contains(t, *f.get(row2.ID).LastError,
		"no node could be claimed in 1 attempt: alternates consumed by concurrent claims, and Placement has no candidates left "+
			"(3 selections tried: 3 taken in Placement, 0 changed in the database)")
	for _, c := range stolen {
		require.NoError(t, f.pc.DeleteAllocations(ctx, c))
	}
	f.checkNoLeak([]int64{row.ID, row2.ID})
}

// TestPlacementProcessNodeChanged changes the chosen nodes in the database
// after Placement offered them, every round: the claims are given back and
// the allocation fails after MaxAttempts rounds.
func TestPlacementProcessNodeChanged(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	f.goldNodes(4)
	ctx := context.Background()
	me := f.conductor("c1")
	a := f.allocator("c1")
	rounds := 0
	a.Scheduler().Filter = unmaintain{f, hookFilter{real: fitFilter{f.q}, hook: func(nodes []uuid.UUID) {
		rounds++
		_, err := f.pool.Exec(ctx, `UPDATE nodes SET maintenance = true WHERE uuid = ANY($1)`, nodes)
		require.NoError(t, err)
	}}}
	row := f.allocation(nil, "gold")
	out, err := settle(ctx, a, me, f.claim(row.ID, me))
	require.NoError(t, err)
	require.Equal(t, Failed, out)
	require.Equal(t, 3, rounds)
	require.Contains(t, *f.get(row.ID).LastError,
		"no node could be claimed in 3 attempts: alternates consumed by concurrent claims "+
			"(9 selections tried: 0 taken in Placement, 9 changed in the database)")
	f.checkNoLeak([]int64{row.ID})
}

// unmaintain clears maintenance on every node before filtering.
type unmaintain struct {
	f    *pfixture
	next scheduler.NodeFilter
}

func (u unmaintain) FitNodes(ctx context.Context, spec scheduler.RequestSpec, nodes []uuid.UUID) ([]uuid.UUID, error) {
	if _, err := u.f.pool.Exec(ctx, `UPDATE nodes SET maintenance = false`); err != nil {
		return nil, err
	}
	return u.next.FitNodes(ctx, spec, nodes)
}

// TestPlacementProcessResume resumes an allocation whose previous run
// claimed a node in Placement and died: the claim is replaced, not doubled.
func TestPlacementProcessResume(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	all := f.goldNodes(3)
	ctx := context.Background()
	me := f.conductor("c1")
	row := f.allocation(nil, "gold")
	// The previous run: logged and claimed all[0], then died. all[0] is
	// now in maintenance, so this run must go elsewhere.
	require.NoError(t, f.q.RecordPlacementClaim(ctx, RecordPlacementClaimParams{ConsumerUuid: row.Uuid, ProviderUuid: all[0]}))
	require.NoError(t, f.pc.PutAllocations(ctx, row.Uuid, client.Claim{ProjectID: "metalloc", UserID: "metalloc",
		Request: client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{
			all[0]: {Resources: client.Resources{"CUSTOM_GOLD": 1}}}}}))
	_, err := f.pool.Exec(ctx, `UPDATE nodes SET maintenance = true WHERE uuid = $1`, all[0])
	require.NoError(t, err)
	out, err := settle(ctx, f.allocator("c1"), me, f.claim(row.ID, me))
	require.NoError(t, err)
	require.Equal(t, Reserved, out)
	require.NotEqual(t, all[0], *f.get(row.ID).NodeUUID)
	f.checkNoLeak([]int64{row.ID})
}

// TestPlacementProcessLost: an allocation this conductor no longer owns is
// dropped; its Placement allocation is removed unless the new owner holds
// the consumer.
func TestPlacementProcessLost(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	f.goldNodes(3)
	ctx := context.Background()
	me := f.conductor("c1")
	other := f.conductor("c2")
	a := f.allocator("c1")

	// Taken over by c2 while c1 worked: c2 owns the consumer now.
	row := f.allocation(nil, "gold")
	c := f.claim(row.ID, me)
	f.claim(row.ID, other)
	out, err := settle(ctx, a, me, c)
	require.NoError(t, err)
	require.Equal(t, Lost, out)
	require.Equal(t, allocation.StateAllocating, f.get(row.ID).State)
	cur, err := f.pc.GetAllocations(ctx, row.Uuid)
	require.NoError(t, err)
	require.Len(t, cur.Allocations, 1, "the new owner's consumer is left alone")
	// c2 resumes it: the consumer is replaced, nothing leaks.
	out, err = settle(ctx, f.allocator("c2"), other, f.claim(row.ID, other))
	require.NoError(t, err)
	require.Equal(t, Reserved, out)
	f.checkNoLeak([]int64{row.ID})

	// Moved to error behind its back: the claim is removed.
	row2 := f.allocation(nil, "gold")
	c = f.claim(row2.ID, me)
	_, err = f.pool.Exec(ctx, `UPDATE allocations SET state = 'error', last_error = 'x' WHERE id = $1`, row2.ID)
	require.NoError(t, err)
	out, err = settle(ctx, a, me, c)
	require.NoError(t, err)
	require.Equal(t, Lost, out)
	f.checkNoLeak([]int64{row.ID, row2.ID})
}

// TestPlacementProcessUnreachable: with Placement down the row stays
// allocating and owned, and nothing is written.
func TestPlacementProcessUnreachable(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	f.pnode("gold-0", "gold")
	ctx := context.Background()
	me := f.conductor("c1")
	down := NewPlacement(f.pool, client.New("http://127.0.0.1:1", "admin", time.Second),
		PlacementConfig{Hostname: "c1"}, zaptest.NewLogger(t))
	row := f.allocation(nil, "gold")
	c := f.claim(row.ID, me)
	_, err := settle(ctx, down, me, c)
	require.Error(t, err)
	require.True(t, client.IsUnreachable(err), "%v", err)
	require.Equal(t, allocation.StateAllocating, f.get(row.ID).State)
	var owner int64
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT conductor_affinity FROM allocations WHERE id = $1`, row.ID).Scan(&owner))
	require.Equal(t, me, owner)
	// Resumed once Placement answers.
	out, err := settle(ctx, f.allocator("c1"), me, c)
	require.NoError(t, err)
	require.Equal(t, Reserved, out)
	f.checkNoLeak([]int64{row.ID})
}

// TestPlacementBatchHTTPBoundsRequests: over HTTP, a batch of 20 rows (more
// than httpBatchConcurrency) is claimed with at most httpBatchConcurrency
// allocation writes in flight to Placement at a time, and every row is
// reserved. A proxy in front of metalloc-placement counts the writes in
// flight and holds each one 20 ms, so that the batch's claims overlap.
func TestPlacementBatchHTTPBoundsRequests(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	f.goldNodes(20)
	target, err := url.Parse(f.pc.Endpoint())
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var inFlight, most atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/allocations/") {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(20 * time.Millisecond)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	me := f.conductor("c1")
	a := NewPlacement(f.pool, client.New(srv.URL, "admin", 10*time.Second),
		PlacementConfig{Hostname: "c1", Mode: PlacementModeHTTP}, zaptest.NewLogger(t))
	var batch []Claimed
	var ids []int64
	for range 20 {
		r := f.allocation(nil, "gold")
		ids = append(ids, r.ID)
		batch = append(batch, f.claim(r.ID, me))
	}
	reserved, rest := a.ClaimBatch(context.Background(), me, batch)
	require.Empty(t, rest)
	require.Len(t, reserved, 20)
	require.Positive(t, most.Load())
	require.LessOrEqual(t, most.Load(), int64(httpBatchConcurrency), "allocation writes in flight at once")
	f.checkNoLeak(ids)
}
