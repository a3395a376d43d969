package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/node"
)

// TestFleet checks GET /v1/ui/fleet: node states put into the page's five
// categories, racks in natural order (2 before 10, no rack last),
// dictionaries, free/total per class and rack, and Store.Fleet's project
// scope (owner or lessee).
func TestFleet(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rack := func(row, r any) map[string]any { return map[string]any{"row": row, "rack": r} }
	avail := e.availableNode(map[string]any{"name": "avail", "resource_class": "gold", "owner": "p1", "extra": rack(1, 10)})
	active := e.activeNode(map[string]any{"name": "active", "resource_class": "gold", "lessee": "p1", "extra": rack(1, 2)})
	maint := e.availableNode(map[string]any{"name": "maint", "resource_class": "silver", "extra": rack(1, 2)})
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+maint+"/maintenance", "1.82", map[string]any{"reason": "x"})
	enroll := e.createNode(map[string]any{"name": "enroll", "resource_class": "silver"})["uuid"].(string)
	e.must(http.StatusNoContent, http.MethodPut, "/v1/nodes/"+avail+"/traits/CUSTOM_B", "1.82", nil)
	e.must(http.StatusNoContent, http.MethodPut, "/v1/nodes/"+avail+"/traits/CUSTOM_A", "1.82", nil)

	r := e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet", "", nil)
	raw, err := json.Marshal(r.body)
	require.NoError(t, err)
	var f node.Fleet
	require.NoError(t, json.Unmarshal(raw, &f))
	require.Equal(t, []string{"available", "allocated", "maintenance", "manageable", "error"}, f.States)
	require.Equal(t, []string{"gold", "silver"}, f.Classes)
	require.Equal(t, []string{"", "p1"}, f.Owners)
	require.Equal(t, []string{"CUSTOM_A", "CUSTOM_B"}, f.Traits)
	require.Equal(t, []node.FleetRack{
		{Row: "1", Rack: "2", FreeTotal: node.FreeTotal{Free: 0, Total: 2}, States: []int{0, 1, 1, 0, 0}},
		{Row: "1", Rack: "10", FreeTotal: node.FreeTotal{Free: 1, Total: 1}, States: []int{1, 0, 0, 0, 0}},
		{Row: "", Rack: "", FreeTotal: node.FreeTotal{Free: 0, Total: 1}, States: []int{0, 0, 0, 1, 0}},
	}, f.Racks)
	require.Equal(t, []node.FleetRow{
		{Row: "1", Racks: 2, FreeTotal: node.FreeTotal{Free: 1, Total: 3}, States: []int{1, 1, 1, 0, 0}},
		{Row: "", Racks: 1, FreeTotal: node.FreeTotal{Free: 0, Total: 1}, States: []int{0, 0, 0, 1, 0}},
	}, f.Rows)
	require.Equal(t, 4, f.Total)
	require.Equal(t, 4, f.Matched)
	require.Equal(t, 4, f.SelectionTotal)
	require.Equal(t, []node.FreeTotal{{Name: "gold", Free: 1, Total: 2}, {Name: "silver", Free: 0, Total: 2}}, f.ClassSummary)
	require.NotNil(t, f.Nodes)
	state := map[string]string{}
	for i, u := range f.Nodes.UUID {
		state[u] = f.States[f.Nodes.State[i]]
		if u == avail {
			require.Equal(t, []int{0, 1}, f.Nodes.Traits[i])
			require.Equal(t, 1, f.Nodes.Rack[i])
			require.Equal(t, "avail", f.Nodes.Name[i])
		}
	}
	require.Equal(t, map[string]string{avail: "available", active: "allocated", maint: "maintenance", enroll: "manageable"}, state)

	// A filter counts the nodes it selects per state; the rest is the same.
	r = e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet?resource_class=silver", "", nil)
	f = decodeFleet(t, r)
	require.Equal(t, 2, f.Matched)
	require.Equal(t, []int{0, 0, 1, 0, 0}, f.Racks[0].States)
	require.Equal(t, []int{0, 0, 0, 1, 0}, f.Racks[2].States)
	require.Equal(t, 4, f.Total)
	f = decodeFleet(t, e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet?trait=CUSTOM_A&owner=p1", "", nil))
	require.Equal(t, 1, f.Matched)
	require.Equal(t, []int{1, 0, 0, 0, 0}, f.Racks[1].States)
	f = decodeFleet(t, e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet?owner=", "", nil))
	require.Equal(t, 3, f.Matched, "owner= selects the nodes without an owner")

	// Zoomed into row 1, rack 2: that row's racks, that rack's nodes.
	f = decodeFleet(t, e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet?row=1&rack=2", "", nil))
	require.Len(t, f.Racks, 2)
	require.Equal(t, 2, f.SelectionTotal)
	require.ElementsMatch(t, []string{active, maint}, f.Nodes.UUID)
	require.Equal(t, []int{0, 0}, f.Nodes.Rack)
	f = decodeFleet(t, e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet?row=", "", nil))
	require.Equal(t, []string{enroll}, f.Nodes.UUID, "row= is the nodes without a row")

	for _, bad := range []string{"rack=2", "row=%00", "trait=%ff"} {
		r := e.do(http.MethodGet, "/v1/ui/fleet?"+bad, "", nil)
		require.Equal(t, http.StatusBadRequest, r.status, bad)
	}

	p1 := "p1"
	scoped, err := e.store.Fleet(context.Background(), node.FleetQuery{Project: &p1})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{avail, active}, scoped.Nodes.UUID)
	require.Equal(t, []string{"CUSTOM_A", "CUSTOM_B"}, scoped.Traits)
}

// decodeFleet decodes a GET /v1/ui/fleet answer.
func decodeFleet(t *testing.T, r response) node.Fleet {
	t.Helper()
	var f node.Fleet
	require.NoError(t, json.Unmarshal(r.raw, &f), string(r.raw))
	return f
}

// TestFleetAggregates: above FleetMaxNodes nodes the summary has no node
// columns, only counts per row and rack; zoomed into a row (or a rack) it
// has that selection's nodes; above FleetMaxRacks racks it has rows only,
// and the racks of the row zoomed into.
func TestFleetAggregates(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// 25,000 nodes: 13 rows of 50 racks of 40 (the last row short).
	dbtest.Fleet(t, e.pool, 25_000)
	f := decodeFleet(t, e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet", "", nil))
	require.Nil(t, f.Nodes)
	require.Equal(t, 25_000, f.Total)
	require.Len(t, f.Racks, 625)
	require.Len(t, f.Rows, 13)
	require.Equal(t, node.FleetRow{Row: "1", Racks: 50, FreeTotal: node.FreeTotal{Free: f.Rows[0].Free, Total: 2000},
		States: f.Rows[0].States}, f.Rows[0])
	sum := 0
	for _, n := range f.Rows[0].States {
		sum += n
	}
	require.Equal(t, 2000, sum)

	f = decodeFleet(t, e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet?row=2", "", nil))
	require.Len(t, f.Racks, 50)
	require.Equal(t, 2000, f.SelectionTotal)
	require.Len(t, f.Nodes.UUID, 2000)
	for _, k := range f.Nodes.Rack {
		require.True(t, k >= 0 && k < 50)
	}
	f = decodeFleet(t, e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet?row=2&rack=7", "", nil))
	require.Len(t, f.Nodes.UUID, 40)
	for _, k := range f.Nodes.Rack {
		require.Equal(t, "7", f.Racks[k].Rack)
	}

	// Every node in a rack of its own, in two rows: more racks than
	// FleetMaxRacks, in the fleet and in row 1.
	_, err := e.pool.Exec(context.Background(),
		`UPDATE nodes SET extra = jsonb_build_object('row', CASE WHEN id % 5 = 0 THEN 2 ELSE 1 END, 'rack', id)`)
	require.NoError(t, err)
	f = decodeFleet(t, e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet?resource_class=gpu", "", nil))
	require.Nil(t, f.Racks)
	require.Nil(t, f.Nodes)
	require.Len(t, f.Rows, 2)
	require.Equal(t, 6250, f.Matched)
	// (Filters no request used before the change: the counts of one may
	// be shared with a request shortly before.)
	f = decodeFleet(t, e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet?row=1&resource_class=gold", "", nil))
	require.Len(t, f.Racks, node.FleetMaxRacks, "a row's racks, at most RackLimit")
	require.Nil(t, f.Nodes, "not every rack of the row is listed")
	f = decodeFleet(t, e.must(http.StatusOK, http.MethodGet, "/v1/ui/fleet?row=2&resource_class=silver", "", nil))
	require.Len(t, f.Racks, 5000)
	require.Len(t, f.Nodes.UUID, 5000)
}
