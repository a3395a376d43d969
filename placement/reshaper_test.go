package placement

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestReshaper(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	root := mkProvider(t, pool, "root")
	child := mkProvider(t, pool, "child")
	setInv(t, srv, root, `{"VCPU": {"total": 8}, "DISK_GB": {"total": 100}}`)
	cons := uuid.NewString()
	st, _, body := call(t, srv, "PUT", "/allocations/"+cons, "1.28", fmt.Sprintf(
		`{"allocations": {"%s": {"resources": {"VCPU": 2, "DISK_GB": 10}}}, "project_id": "p", "user_id": "u",
		  "consumer_generation": null}`, root))
	require.Equal(t, 204, st, body)

	moveBody := func(rootGen, childGen, consGen int, childVCPU int) string {
		return fmt.Sprintf(`{
		  "inventories": {
		    "%s": {"resource_provider_generation": %d, "inventories": {"DISK_GB": {"total": 100}}},
		    "%s": {"resource_provider_generation": %d, "inventories": {"VCPU": {"total": %d}}}},
		  "allocations": {
		    "%s": {"allocations": {"%s": {"resources": {"DISK_GB": 10}}, "%s": {"resources": {"VCPU": 2}}},
		           "project_id": "p", "user_id": "u", "consumer_generation": %d}}}`,
			root, rootGen, child, childGen, childVCPU, cons, root, child, consGen)
	}

	st, _, _ = call(t, srv, "POST", "/reshaper", "1.29", moveBody(2, 0, 1, 8))
	require.Equal(t, 404, st)
	st, _, body = call(t, srv, "POST", "/reshaper", "1.30", moveBody(1, 0, 1, 8))
	require.Equal(t, 409, st, body)
	_, code, _ := errOf(t, body)
	require.Equal(t, "placement.concurrent_update", code)
	st, _, body = call(t, srv, "POST", "/reshaper", "1.30", moveBody(2, 0, 0, 8))
	require.Equal(t, 409, st, body)
	// Allocations that do not fit the new inventory: nothing changes.
	st, _, body = call(t, srv, "POST", "/reshaper", "1.30", moveBody(2, 0, 1, 1))
	require.Equal(t, 409, st, body)
	st, _, body = call(t, srv, "GET", "/resource_providers/"+root+"/usages", "", "")
	require.Equal(t, 200, st)
	require.EqualValues(t, 2, body["usages"].(map[string]any)["VCPU"])
	// Removing inventory still allocated: inventory.inuse.
	st, _, body = call(t, srv, "POST", "/reshaper", "1.30", fmt.Sprintf(`{
	  "inventories": {"%s": {"resource_provider_generation": 2, "inventories": {"DISK_GB": {"total": 100}}}},
	  "allocations": {}}`, root))
	require.Equal(t, 409, st, body)
	_, code, _ = errOf(t, body)
	require.Equal(t, "placement.inventory.inuse", code)
	// Unknown provider, unknown class.
	st, _, body = call(t, srv, "POST", "/reshaper", "1.30", fmt.Sprintf(`{
	  "inventories": {"%s": {"resource_provider_generation": 0, "inventories": {}}}, "allocations": {}}`, uuid.NewString()))
	require.Equal(t, 400, st, body)
	_, code, _ = errOf(t, body)
	require.Equal(t, "placement.resource_provider.not_found", code)
	st, _, body = call(t, srv, "POST", "/reshaper", "1.30", fmt.Sprintf(`{
	  "inventories": {"%s": {"resource_provider_generation": 0, "inventories": {"CUSTOM_NOPE": {"total": 1}}}}, "allocations": {}}`, child))
	require.Equal(t, 400, st, body)

	// The move itself.
	st, _, body = call(t, srv, "POST", "/reshaper", "1.30", moveBody(2, 0, 1, 8))
	require.Equal(t, 204, st, body)
	st, _, body = call(t, srv, "GET", "/resource_providers/"+root+"/inventories", "", "")
	require.Equal(t, 200, st)
	require.Len(t, body["inventories"], 1)
	st, _, body = call(t, srv, "GET", "/resource_providers/"+child+"/usages", "", "")
	require.Equal(t, 200, st)
	require.EqualValues(t, 2, body["usages"].(map[string]any)["VCPU"])
	st, _, body = call(t, srv, "GET", "/allocations/"+cons, "1.28", "")
	require.Equal(t, 200, st)
	require.Len(t, body["allocations"], 2)
	require.EqualValues(t, 2, body["consumer_generation"])
}

// TestReshaperGenerations: a reshaped provider ends where Placement's
// reshape leaves it: +1 for the interim inventory (when the new one is not
// empty), +1 when the new allocations name it, +1 for the final inventory.
func TestReshaperGenerations(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	a := mkProvider(t, pool, "a")
	b := mkProvider(t, pool, "b")
	setInv(t, srv, a, `{"VCPU": {"total": 8}}`)
	setInv(t, srv, b, `{"VCPU": {"total": 8}}`)
	gen := func(rp string) float64 {
		_, _, body := call(t, srv, "GET", "/resource_providers/"+rp, "1.14", "")
		return body["generation"].(float64)
	}
	st, _, body := call(t, srv, "POST", "/reshaper", "1.30", fmt.Sprintf(`{
	  "inventories": {
	    "%s": {"resource_provider_generation": 1, "inventories": {"VCPU": {"total": 4}}},
	    "%s": {"resource_provider_generation": 1, "inventories": {"VCPU": {"total": 4}}}},
	  "allocations": {"%s": {"allocations": {"%s": {"resources": {"VCPU": 1}}},
	    "project_id": "p", "user_id": "u", "consumer_generation": null}}}`, a, b, uuid.NewString(), b))
	require.Equal(t, 204, st, body)
	require.Equal(t, float64(3), gen(a), "interim + final")
	require.Equal(t, float64(4), gen(b), "interim + allocations + final")
}
