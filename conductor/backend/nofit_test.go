package backend

import (
	"context"
	"fmt"
	"github.com/metalloc/metalloc/allocation"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// noFitCase is an allocation no node fits and the last_error expected for it
// (after "Failed to process allocation <uuid>: "), the same for both backends.
type noFitCase struct {
	name       string
	rc         string
	candidates []string // node names
	owner      *string
	traits     []string
	want       string
}

func noFitCases() []noFitCase {
	p1, p2 := "p1", "p2"
	return []noFitCase{
		{name: "class all in maintenance", rc: "silver",
			want: "no available nodes match the resource class silver. (no node fits: 1 of resource class silver, 0 available; " +
				"not available: 1 in maintenance)"},
		// Each unavailable node counted once, for its first reason: in
		// maintenance (copper-0, and copper-4 with an instance too), an
		// instance, a provision state other than available, no power
		// state (which Ironic needs to allocate a node).
		{name: "why unavailable", rc: "copper",
			want: "no available nodes match the resource class copper. (no node fits: 7 of resource class copper, 0 available; " +
				"not available: 2 in maintenance, 1 holds an allocation or instance, 1 not in provision state available, " +
				"3 have no power state (Ironic allocates only nodes with a power state: power them off first))"},
		{name: "class without nodes", rc: "bronze",
			want: "no available nodes match the resource class bronze. (no node fits: 0 of resource class bronze, 0 available)"},
		// Only the owner's nodes are counted: its members read last_error,
		// the fleet's other nodes are none of their business.
		{name: "owner owns none", rc: "gold", owner: &p1,
			want: "no available nodes match the resource class gold. (no node fits: 0 of resource class gold owned by or leased to p1, 0 available)"},
		{name: "owner's nodes unavailable", rc: "gold", owner: &p2,
			want: "no available nodes match the resource class gold. (no node fits: 1 of resource class gold owned by or leased to p2, 0 available; " +
				"not available: 1 in maintenance)"},
		{name: "owner's candidates", rc: "gold", owner: &p2, candidates: []string{"gold-0", "gold-2"},
			want: "none of the requested nodes are available and match the resource class gold. " +
				"(no node fits: 1 of resource class gold owned by or leased to p2, 0 available, 0 among the 2 candidate_nodes; " +
				"not available: 1 in maintenance)"},
		{name: "candidates unavailable", rc: "gold", candidates: []string{"gold-2"},
			want: "none of the requested nodes are available and match the resource class gold. " +
				"(no node fits: 3 of resource class gold, 2 available, 0 among the 1 candidate_nodes)"},
		{name: "candidates of another class", rc: "silver", candidates: []string{"gold-0", "gold-1"},
			want: "none of the requested nodes are available and match the resource class silver. " +
				"(no node fits: 1 of resource class silver, 0 available, 0 among the 2 candidate_nodes; not available: 1 in maintenance)"},
		{name: "traits", rc: "gold", traits: []string{"CUSTOM_A", "CUSTOM_C"},
			want: "no suitable nodes have the requested traits CUSTOM_A, CUSTOM_C. " +
				"(no node fits: 3 of resource class gold, 2 available, 0 with traits CUSTOM_A, CUSTOM_C)"},
		{name: "traits among candidates", rc: "gold", candidates: []string{"gold-0"}, traits: []string{"CUSTOM_B"},
			want: "no suitable nodes have the requested traits CUSTOM_B. " +
				"(no node fits: 3 of resource class gold, 2 available, 1 among the 1 candidate_nodes, 0 with traits CUSTOM_B)"},
	}
}

// noFitNodes enrols the nodes noFitCases expect: gold-0 (CUSTOM_A), gold-1
// (CUSTOM_A, CUSTOM_B), gold-2 (CUSTOM_A, in maintenance, leased to p2),
// silver-0 (in maintenance), copper-0 ... copper-6 (none available: in
// maintenance; with an instance; manageable; without a power state (3);
// in maintenance with an instance), each with add (a node alone, or with
// its provider). It returns the nodes' uuids by name.
func noFitNodes(t *testing.T, f *fixture, add func(name, rc string, traits ...string)) map[string]uuid.UUID {
	add("gold-0", "gold", "CUSTOM_A")
	add("gold-1", "gold", "CUSTOM_A", "CUSTOM_B")
	add("gold-2", "gold", "CUSTOM_A")
	add("silver-0", "silver")
	for k := range 7 {
		add(fmt.Sprintf("copper-%d", k), "copper")
	}
	ctx := context.Background()
	_, err := f.pool.Exec(ctx, `UPDATE nodes SET maintenance = true WHERE name IN ('gold-2', 'silver-0', 'copper-0', 'copper-4')`)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE nodes SET instance_uuid = gen_random_uuid() WHERE name IN ('copper-1', 'copper-4')`)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE nodes SET provision_state = 'manageable' WHERE name = 'copper-2'`)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE nodes SET power_state = NULL WHERE name IN ('copper-3', 'copper-5', 'copper-6')`)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE nodes SET lessee = 'p2' WHERE name = 'gold-2'`)
	require.NoError(t, err)
	rows, err := f.pool.Query(ctx, `SELECT name, uuid FROM nodes`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]uuid.UUID{}
	for rows.Next() {
		var n string
		var u uuid.UUID
		require.NoError(t, rows.Scan(&n, &u))
		out[n] = u
	}
	require.NoError(t, rows.Err())
	return out
}

// noFitAllocation inserts tc's allocation, allocating and unowned.
func noFitAllocation(t *testing.T, f *fixture, tc noFitCase, nodes map[string]uuid.UUID) allocation.CreateAllocationRow {
	var cands []uuid.UUID
	for _, n := range tc.candidates {
		cands = append(cands, nodes[n])
	}
	traits := tc.traits
	if traits == nil {
		traits = []string{}
	}
	row, err := f.aq.CreateAllocation(context.Background(), allocation.CreateAllocationParams{
		Uuid: uuid.New(), ResourceClass: tc.rc, CandidateNodes: cands, Owner: tc.owner,
		Extra: []byte("{}"), State: allocation.StateAllocating, Traits: traits,
	})
	require.NoError(t, err)
	return row
}

func TestReserveNoFitIronicSentences(t *testing.T) {
	t.Parallel()
	f := setup(t)
	nodes := noFitNodes(t, f, func(name, rc string, traits ...string) { f.node(name, rc, traits...) })
	a := NewDatabase(f.pool, zaptest.NewLogger(t))
	me := f.conductor("c1")
	for _, tc := range noFitCases() {
		row := noFitAllocation(t, f, tc, nodes)
		claimed := claim(t, a, me, 1)
		require.Len(t, claimed, 1, tc.name)
		out, err := settle(context.Background(), a, me, claimed[0])
		require.NoError(t, err, tc.name)
		require.Equal(t, Failed, out, tc.name)
		v := f.get(row.ID)
		require.Equal(t, allocation.StateError, v.State, tc.name)
		require.Equal(t, fmt.Sprintf("Failed to process allocation %s: %s", v.Uuid, tc.want), *v.LastError, tc.name)
	}
}

func TestPlacementNoFitIronicSentences(t *testing.T) {
	t.Parallel()
	f := psetup(t)
	nodes := noFitNodes(t, f.fixture, func(name, rc string, traits ...string) { f.pnode(name, rc, traits...) })
	a := f.allocator("c1")
	me := f.conductor("c1")
	var ids []int64
	for _, tc := range noFitCases() {
		row := noFitAllocation(t, f.fixture, tc, nodes)
		ids = append(ids, row.ID)
		out, err := settle(context.Background(), a, me, f.claim(row.ID, me))
		require.NoError(t, err, tc.name)
		require.Equal(t, Failed, out, tc.name)
		v := f.get(row.ID)
		require.Equal(t, allocation.StateError, v.State, tc.name)
		require.Equal(t, fmt.Sprintf("Failed to process allocation %s: %s", v.Uuid, tc.want), *v.LastError, tc.name)
	}
	f.checkNoLeak(ids)
}
