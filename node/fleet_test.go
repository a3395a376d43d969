package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

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
		{Row: "1", Rack: "2", FreeTotal: node.FreeTotal{Free: 0, Total: 2}},
		{Row: "1", Rack: "10", FreeTotal: node.FreeTotal{Free: 1, Total: 1}},
		{Row: "", Rack: "", FreeTotal: node.FreeTotal{Free: 0, Total: 1}},
	}, f.Racks)
	require.Equal(t, []node.FreeTotal{{Name: "gold", Free: 1, Total: 2}, {Name: "silver", Free: 0, Total: 2}}, f.ClassSummary)
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

	p1 := "p1"
	scoped, err := e.store.Fleet(context.Background(), &p1)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{avail, active}, scoped.Nodes.UUID)
}
