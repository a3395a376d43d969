package port_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
)

const latest = "1.82"

func ptr[T any](v T) *T { return &v }

// TestPortCRUD: create (MAC normalised to lower case, pxe_enabled default
// true, Location), show (fields), list (default fields, detail=True,
// /detail), patch and delete, as Ironic answers them.
func TestPortCRUD(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	_, nu := dbtest.Node(t, pool, dbtest.NodeSpec{Name: "n1", ProvisionState: "manageable"})

	created := e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{
		"address": "52:54:00:AB:CD:EF", "node_uuid": nu.String(), "extra": map[string]any{"k": "v"},
		"local_link_connection": map[string]any{"port_id": "Ethernet1/1", "switch_id": "AA:BB:CC:DD:EE:FF"},
		"physical_network":      "physnet1",
	}})
	p := created.body
	id := p["uuid"].(string)
	require.Equal(t, "52:54:00:ab:cd:ef", p["address"])
	require.Equal(t, nu.String(), p["node_uuid"])
	require.Equal(t, true, p["pxe_enabled"])
	require.Equal(t, false, p["is_smartnic"])
	require.Nil(t, p["portgroup_uuid"])
	require.Equal(t, "physnet1", p["physical_network"])
	require.Equal(t, "aa:bb:cc:dd:ee:ff", p["local_link_connection"].(map[string]any)["switch_id"])
	require.Equal(t, map[string]any{}, p["internal_info"])
	require.Equal(t, "http://metalloc.test:6385/v1/ports/"+id, created.header.Get("Location"))
	require.Len(t, p["links"], 2)

	got := e.must(http.StatusOK, req{"GET", "/v1/ports/" + id, latest, "", nil}).body
	require.Equal(t, p["address"], got["address"])
	got = e.must(http.StatusOK, req{"GET", "/v1/ports/" + id + "?fields=address,extra", latest, "", nil}).body
	require.Len(t, got, 3, "address, extra and links: %v", got)
	e.mustFail(http.StatusBadRequest, `Field(s) "bogus" are not valid`, req{"GET", "/v1/ports/" + id + "?fields=bogus", latest, "", nil})

	list := items(t, e.must(http.StatusOK, req{"GET", "/v1/ports", latest, "", nil}).body, "ports")
	require.Len(t, list, 1)
	require.Len(t, list[0], 3, "uuid, address, links: %v", list[0])
	list = items(t, e.must(http.StatusOK, req{"GET", "/v1/ports?detail=True", latest, "", nil}).body, "ports")
	require.Equal(t, "physnet1", list[0]["physical_network"])
	list = items(t, e.must(http.StatusOK, req{"GET", "/v1/ports/detail", latest, "", nil}).body, "ports")
	require.Equal(t, nu.String(), list[0]["node_uuid"])

	patched := e.must(http.StatusOK, req{"PATCH", "/v1/ports/" + id, latest, "", []map[string]any{
		{"op": "add", "path": "/extra/x", "value": 1},
		{"op": "replace", "path": "/address", "value": "52:54:00:00:00:01"},
		{"op": "replace", "path": "/pxe_enabled", "value": "false"},
	}}).body
	require.Equal(t, map[string]any{"k": "v", "x": float64(1)}, patched["extra"])
	require.Equal(t, "52:54:00:00:00:01", patched["address"])
	require.Equal(t, false, patched["pxe_enabled"])
	require.NotNil(t, patched["updated_at"])

	e.must(http.StatusNoContent, req{"DELETE", "/v1/ports/" + id, latest, "", nil})
	e.mustFail(http.StatusNotFound, "Port "+id+" could not be found.", req{"GET", "/v1/ports/" + id, latest, "", nil})
	e.mustFail(http.StatusBadRequest, "Expected UUID for port_uuid: nope", req{"GET", "/v1/ports/nope", latest, "", nil})
}

// TestPortUniqueMAC: a MAC address is unique across ports whatever its
// case (409 with Ironic's message), on create and on patch.
func TestPortUniqueMAC(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	_, n1 := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "manageable"})
	_, n2 := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "manageable"})
	e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:aa", "node_uuid": n1.String()}})
	e.mustFail(http.StatusConflict, "A port with MAC address 52:54:00:00:00:aa already exists.",
		req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:AA", "node_uuid": n2.String()}})
	other := e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:bb", "node_uuid": n2.String()}}).body
	e.mustFail(http.StatusConflict, "A port with MAC address 52:54:00:00:00:aa already exists.",
		req{"PATCH", "/v1/ports/" + other["uuid"].(string), latest, "", []map[string]any{{"op": "replace", "path": "/address", "value": "52:54:00:00:00:Aa"}}})
	u := uuid.NewString()
	e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:cc", "node_uuid": n1.String(), "uuid": u}})
	e.mustFail(http.StatusConflict, "A port with UUID "+u+" already exists.",
		req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:dd", "node_uuid": n1.String(), "uuid": u}})
	require.Equal(t, 3, dbtest.Count(t, pool, `SELECT count(*) FROM ports`))
}

// TestPortValidation: bad bodies are 400 with Ironic's messages.
func TestPortValidation(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	_, nu := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "manageable"})
	n := nu.String()
	missing := uuid.NewString()
	for _, c := range []struct {
		body  any
		fault string
	}{
		{map[string]any{"address": "zz", "node_uuid": n}, "Expected valid MAC address for address: zz"},
		{map[string]any{"address": "52:54:00:00:00:01", "node_uuid": "x"}, "Expected UUID for node_uuid: x"},
		{map[string]any{"address": "52:54:00:00:00:01", "node_uuid": missing}, "Node " + missing + " could not be found."},
		{map[string]any{"address": "52:54:00:00:00:01"}, "Schema error for port: 'node_uuid' is a required property"},
		{map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n, "name": "p"}, "Schema error for port: Additional properties are not allowed ('name' was unexpected)"},
		{map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n, "pxe_enabled": "maybe"},
			"Invalid pxe_enabled: Unrecognized value 'maybe', acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'"},
		{map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n, "physical_network": ""}, "A non-empty value is required when setting physical_network"},
		{map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n, "is_smartnic": true, "local_link_connection": map[string]any{}}, "Smart NIC port must have port_id and hostname in local_link_connection"},
		{map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n, "local_link_connection": map[string]any{"port_id": "p", "switch_id": "nope"}},
			"Expected a MAC address or OpenFlow datapath ID but received nope."},
		{map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n, "portgroup_uuid": missing}, "Portgroup " + missing + " could not be found."},
	} {
		e.mustFail(http.StatusBadRequest, c.fault, req{"POST", "/v1/ports", latest, "", c.body})
	}
	// A datapath id is a valid switch_id, lower-cased.
	p := e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n,
		"is_smartnic": true, "local_link_connection": map[string]any{"port_id": "p", "hostname": "h", "switch_id": "0123456789ABCDEF"}}}).body
	require.Equal(t, "0123456789abcdef", p["local_link_connection"].(map[string]any)["switch_id"])
	id := p["uuid"].(string)
	e.mustFail(http.StatusBadRequest, "Cannot patch /uuid. Only the following can be updated: address, extra, is_smartnic, local_link_connection, node_uuid, physical_network, portgroup_uuid, pxe_enabled",
		req{"PATCH", "/v1/ports/" + id, latest, "", []map[string]any{{"op": "replace", "path": "/uuid", "value": uuid.NewString()}}})
	e.mustFail(http.StatusBadRequest, "Schema error for patch: 'address' is a required property",
		req{"PATCH", "/v1/ports/" + id, latest, "", []map[string]any{{"op": "remove", "path": "/address"}}})
	e.mustFail(http.StatusBadRequest, "Node "+missing+" could not be found.",
		req{"PATCH", "/v1/ports/" + id, latest, "", []map[string]any{{"op": "replace", "path": "/node_uuid", "value": missing}}})
}

// TestPortVersionGates: fields appear, and may be set or asked for, from
// the microversion Ironic introduced them in.
func TestPortVersionGates(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	_, nu := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "manageable"})
	n := nu.String()
	p := e.must(http.StatusCreated, req{"POST", "/v1/ports", "", "", map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n}}).body
	id := p["uuid"].(string)
	for _, f := range []string{"pxe_enabled", "local_link_connection", "internal_info", "portgroup_uuid", "physical_network", "is_smartnic"} {
		require.NotContains(t, p, f, "1.1 shows no %s", f)
	}
	shown := func(version string) map[string]any {
		return e.must(http.StatusOK, req{"GET", "/v1/ports/" + id, version, "", nil}).body
	}
	require.Contains(t, shown("1.18"), "internal_info")
	require.NotContains(t, shown("1.18"), "pxe_enabled")
	require.Contains(t, shown("1.19"), "pxe_enabled")
	require.NotContains(t, shown("1.23"), "portgroup_uuid")
	require.Contains(t, shown("1.24"), "portgroup_uuid")
	require.NotContains(t, shown("1.33"), "physical_network")
	require.Contains(t, shown("1.34"), "physical_network")
	require.NotContains(t, shown("1.52"), "is_smartnic")
	require.Contains(t, shown("1.53"), "is_smartnic")

	body := func(k string, v any) map[string]any {
		return map[string]any{"address": "52:54:00:00:00:02", "node_uuid": n, k: v}
	}
	for _, c := range []struct {
		version, key string
		value        any
	}{
		{"1.18", "pxe_enabled", true}, {"1.18", "local_link_connection", map[string]any{}},
		{"1.23", "portgroup_uuid", nil}, {"1.33", "physical_network", "p"}, {"1.52", "is_smartnic", false},
		{"1.63", "local_link_connection", map[string]any{"network_type": "unmanaged"}},
	} {
		e.mustFail(http.StatusNotAcceptable, "Request not acceptable.", req{"POST", "/v1/ports", c.version, "", body(c.key, c.value)})
		path, value := "/"+c.key, c.value
		if c.version == "1.63" {
			// Ironic looks for the sub-path in a patch, not in the value.
			path, value = "/local_link_connection/network_type", "unmanaged"
		}
		e.must(http.StatusNotAcceptable, req{"PATCH", "/v1/ports/" + id, c.version, "", []map[string]any{{"op": "add", "path": path, "value": value}}})
	}
	e.must(http.StatusNotAcceptable, req{"GET", "/v1/ports?fields=uuid", "1.7", "", nil})
	e.must(http.StatusNotAcceptable, req{"GET", "/v1/ports?fields=physical_network", "1.33", "", nil})
	e.must(http.StatusNotAcceptable, req{"GET", "/v1/ports?sort_key=pxe_enabled", "1.18", "", nil})
	e.must(http.StatusNotAcceptable, req{"GET", "/v1/ports?portgroup=pg", "1.23", "", nil})
	e.must(http.StatusNotAcceptable, req{"GET", "/v1/ports?node=n1", "1.4", "", nil})
	e.mustFail(http.StatusBadRequest, "Invalid query parameter ?detail=True received.", req{"GET", "/v1/ports?detail=True", "1.42", "", nil})
	e.mustFail(http.StatusBadRequest, "Can not specify ?detail=True and fields in the same request.",
		req{"GET", "/v1/ports?detail=True&fields=uuid", latest, "", nil})
	e.mustFail(http.StatusBadRequest, "Unexpected arguments: bogus", req{"GET", "/v1/ports?bogus=1", latest, "", nil})
	e.mustFail(http.StatusBadRequest, "Unexpected arguments: fields", req{"GET", "/v1/ports/detail?fields=uuid", latest, "", nil})

	e.must(http.StatusNotFound, req{"GET", "/v1/portgroups", "1.22", "", nil})
	e.must(http.StatusNotFound, req{"POST", "/v1/portgroups", "1.22", "", map[string]any{"node_uuid": n}})
	e.must(http.StatusNotFound, req{"GET", "/v1/nodes/" + n + "/portgroups", "1.23", "", nil})
	e.must(http.StatusOK, req{"GET", "/v1/nodes/" + n + "/portgroups", "1.24", "", nil})
	e.must(http.StatusNotAcceptable, req{"POST", "/v1/portgroups", "1.25", "", map[string]any{"node_uuid": n, "mode": "802.3ad"}})
	e.must(http.StatusNotAcceptable, req{"GET", "/v1/portgroups?fields=mode", "1.25", "", nil})
}

// TestPortListFilters: node (uuid or name), node_uuid, address,
// portgroup and shard filters, the sub-collections, keyset pages with next
// links, and Ironic's list errors.
func TestPortListFilters(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	_, n1 := dbtest.Node(t, pool, dbtest.NodeSpec{Name: "n1", ProvisionState: "manageable"})
	_, n2 := dbtest.Node(t, pool, dbtest.NodeSpec{Name: "n2", ProvisionState: "manageable"})
	_, err := pool.Exec(t.Context(), `UPDATE nodes SET shard = 'a' WHERE uuid = $1`, n2)
	require.NoError(t, err)
	pg := e.must(http.StatusCreated, req{"POST", "/v1/portgroups", latest, "", map[string]any{"node_uuid": n1.String(), "name": "bond0"}}).body
	macs := []string{"52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03", "52:54:00:00:01:01"}
	for i, mac := range macs {
		b := map[string]any{"address": mac, "node_uuid": n1.String()}
		if i == 0 {
			b["portgroup_uuid"] = pg["uuid"]
		}
		if i == 3 {
			b["node_uuid"] = n2.String()
		}
		e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", b})
	}
	count := func(path string) int {
		return len(items(t, e.must(http.StatusOK, req{"GET", path, latest, "", nil}).body, "ports"))
	}
	require.Equal(t, 4, count("/v1/ports"))
	require.Equal(t, 3, count("/v1/ports?node=n1"))
	require.Equal(t, 3, count("/v1/ports?node="+n1.String()))
	require.Equal(t, 1, count("/v1/ports?node_uuid="+n2.String()))
	require.Equal(t, 1, count("/v1/ports?address=52:54:00:00:00:02"))
	require.Equal(t, 1, count("/v1/ports?address=52:54:00:00:00:02&fields=address"))
	require.Equal(t, 0, count("/v1/ports?address=52:54:00:99:99:99"))
	require.Equal(t, 1, count("/v1/ports?portgroup=bond0"))
	require.Equal(t, 1, count("/v1/ports?shard=A"))
	require.Equal(t, 3, count("/v1/nodes/n1/ports"))
	require.Equal(t, 1, count("/v1/nodes/"+n2.String()+"/ports/detail"))
	require.Equal(t, 1, count("/v1/portgroups/bond0/ports"))
	require.Equal(t, 1, count("/v1/portgroups/"+pg["uuid"].(string)+"/ports/detail"))

	page := e.must(http.StatusOK, req{"GET", "/v1/ports?limit=2&sort_key=address&sort_dir=desc", latest, "", nil}).body
	ps := items(t, page, "ports")
	require.Equal(t, []any{"52:54:00:00:01:01", "52:54:00:00:00:03"}, []any{ps[0]["address"], ps[1]["address"]})
	next := page["next"].(string)
	require.Contains(t, next, "http://metalloc.test:6385/v1/ports?")
	require.Contains(t, next, "marker="+ps[1]["uuid"].(string))
	page = e.must(http.StatusOK, req{"GET", strings.TrimPrefix(next, "http://metalloc.test:6385"), latest, "", nil}).body
	ps = items(t, page, "ports")
	require.Equal(t, []any{"52:54:00:00:00:02", "52:54:00:00:00:01"}, []any{ps[0]["address"], ps[1]["address"]})

	e.mustFail(http.StatusForbidden, "Operation not permitted.", req{"GET", "/v1/ports?node=n1&portgroup=bond0", latest, "", nil})
	e.mustFail(http.StatusNotFound, "Node n9 could not be found.", req{"GET", "/v1/ports?node=n9", latest, "", nil})
	e.mustFail(http.StatusNotFound, "Node n9 could not be found.", req{"GET", "/v1/nodes/n9/ports", latest, "", nil})
	e.mustFail(http.StatusNotFound, "Portgroup pg9 could not be found.", req{"GET", "/v1/portgroups/pg9/ports", latest, "", nil})
	e.mustFail(http.StatusBadRequest, "Expected valid MAC address for address: x", req{"GET", "/v1/ports?address=x", latest, "", nil})
	e.mustFail(http.StatusBadRequest, "Expected an integer for limit: x", req{"GET", "/v1/ports?limit=x", latest, "", nil})
	e.mustFail(http.StatusBadRequest, "Limit must be positive", req{"GET", "/v1/ports?limit=0", latest, "", nil})
	e.mustFail(http.StatusBadRequest, "The sort_key value extra is an invalid field for sorting", req{"GET", "/v1/ports?sort_key=extra", latest, "", nil})
	e.mustFail(http.StatusBadRequest, `The sort_key value "node_uuid" is an invalid field for sorting`, req{"GET", "/v1/ports?sort_key=node_uuid", latest, "", nil})
	m := uuid.NewString()
	e.mustFail(http.StatusNotFound, "Port "+m+" could not be found.", req{"GET", "/v1/ports?marker=" + m, latest, "", nil})
}

// TestPortgroups: create (default mode, name), show by uuid and name with
// its ports link, list filters, patch, the port-membership rules, and
// delete refused while it has ports.
func TestPortgroups(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	_, n1 := dbtest.Node(t, pool, dbtest.NodeSpec{Name: "n1", ProvisionState: "manageable"})
	_, n2 := dbtest.Node(t, pool, dbtest.NodeSpec{Name: "n2", ProvisionState: "manageable"})
	g := e.must(http.StatusCreated, req{"POST", "/v1/portgroups", latest, "", map[string]any{
		"node_uuid": n1.String(), "name": "bond0", "address": "52:54:00:00:0A:01", "standalone_ports_supported": false,
		"properties": map[string]any{"miimon": "100"},
	}}).body
	id := g["uuid"].(string)
	require.Equal(t, "active-backup", g["mode"])
	require.Equal(t, "52:54:00:00:0a:01", g["address"])
	require.Equal(t, false, g["standalone_ports_supported"])
	require.Equal(t, "http://metalloc.test:6385/v1/portgroups/"+id+"/ports", g["ports"].([]any)[0].(map[string]any)["href"])
	require.Equal(t, id, e.must(http.StatusOK, req{"GET", "/v1/portgroups/bond0", latest, "", nil}).body["uuid"])
	e.mustFail(http.StatusConflict, "A portgroup with name bond0 already exists.",
		req{"POST", "/v1/portgroups", latest, "", map[string]any{"node_uuid": n1.String(), "name": "bond0"}})
	e.mustFail(http.StatusConflict, "A portgroup with MAC address 52:54:00:00:0a:01 already exists.",
		req{"POST", "/v1/portgroups", latest, "", map[string]any{"node_uuid": n1.String(), "address": "52:54:00:00:0a:01"}})
	e.mustFail(http.StatusBadRequest, "Cannot create portgroup with invalid name 'bad name'",
		req{"POST", "/v1/portgroups", latest, "", map[string]any{"node_uuid": n1.String(), "name": "bad name"}})
	e.must(http.StatusCreated, req{"POST", "/v1/portgroups", latest, "", map[string]any{"node_uuid": n2.String()}})

	list := items(t, e.must(http.StatusOK, req{"GET", "/v1/portgroups", latest, "", nil}).body, "portgroups")
	require.Len(t, list, 2)
	require.Len(t, list[0], 4, "uuid, address, name, links: %v", list[0])
	require.Len(t, items(t, e.must(http.StatusOK, req{"GET", "/v1/portgroups?node=n1", latest, "", nil}).body, "portgroups"), 1)
	require.Len(t, items(t, e.must(http.StatusOK, req{"GET", "/v1/portgroups?address=52:54:00:00:0a:01", latest, "", nil}).body, "portgroups"), 1)
	require.Len(t, items(t, e.must(http.StatusOK, req{"GET", "/v1/nodes/n2/portgroups/detail", latest, "", nil}).body, "portgroups"), 1)

	// Membership: only a group of the port's own node; no PXE port in a
	// group without standalone ports.
	e.mustFail(http.StatusBadRequest, "Port can not be added to a portgroup belonging to a different node.",
		req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n2.String(), "portgroup_uuid": id}})
	e.mustFail(http.StatusConflict, "Port group "+id+" doesn't support standalone ports. This port cannot be created as a member of that portgroup as the port's 'pxe_enabled' field was set to True.",
		req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n1.String(), "portgroup_uuid": id, "pxe_enabled": true}})
	p := e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n1.String(), "portgroup_uuid": id, "pxe_enabled": false}}).body
	require.Equal(t, id, p["portgroup_uuid"])

	patched := e.must(http.StatusOK, req{"PATCH", "/v1/portgroups/bond0", latest, "", []map[string]any{
		{"op": "replace", "path": "/mode", "value": "802.3ad"}, {"op": "replace", "path": "/name", "value": "bond1"},
	}}).body
	require.Equal(t, "802.3ad", patched["mode"])
	require.Equal(t, "bond1", patched["name"])
	e.mustFail(http.StatusBadRequest, "'mode' is a mandatory attribute and can not be removed",
		req{"PATCH", "/v1/portgroups/bond1", latest, "", []map[string]any{{"op": "remove", "path": "/mode"}}})
	e.mustFail(http.StatusBadRequest, "Portgroup "+id+" can not be associated with node "+n2.String()+" because there are ports associated with this portgroup.",
		req{"PATCH", "/v1/portgroups/" + id, latest, "", []map[string]any{{"op": "replace", "path": "/node_uuid", "value": n2.String()}}})

	e.mustFail(http.StatusBadRequest, "Cannot complete the requested action because portgroup "+id+" contains ports.",
		req{"DELETE", "/v1/portgroups/" + id, latest, "", nil})
	e.must(http.StatusOK, req{"PATCH", "/v1/ports/" + p["uuid"].(string), latest, "", []map[string]any{{"op": "remove", "path": "/portgroup_uuid"}}})
	e.must(http.StatusNoContent, req{"DELETE", "/v1/portgroups/" + id, latest, "", nil})
	e.mustFail(http.StatusNotFound, "Portgroup bond1 could not be found.", req{"GET", "/v1/portgroups/bond1", latest, "", nil})
	e.mustFail(http.StatusBadRequest, "Expected UUID or name for portgroup_ident: bad name", req{"GET", "/v1/portgroups/bad%20name", latest, "", nil})
}

// TestPortUpdateRules: the conductor's update_port rules — no new address
// on an active node, connectivity fields only in enroll, manageable,
// inspect states or maintenance — and no changes while inspecting.
func TestPortUpdateRules(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	_, active := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "active"})
	_, inspecting := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "inspecting"})
	create := func(n uuid.UUID, mac string) string {
		return e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": mac, "node_uuid": n.String()}}).body["uuid"].(string)
	}
	p := create(active, "52:54:00:00:00:01")
	patch := func(id, path string, value any) req {
		return req{"PATCH", "/v1/ports/" + id, latest, "", []map[string]any{{"op": "replace", "path": path, "value": value}}}
	}
	e.mustFail(http.StatusConflict, "Cannot update hardware address for port "+p+" as node "+active.String()+" is active or has instance UUID assigned",
		patch(p, "/address", "52:54:00:00:00:02"))
	e.mustFail(http.StatusConflict, "Port "+p+" can not have any connectivity attributes (portgroup_id, pxe_enabled, local_link_connection, physical_network) updated unless node "+active.String()+" is in a enroll, inspecting, inspect wait, manageable state or in maintenance mode. The current state is active.",
		patch(p, "/pxe_enabled", false))
	e.must(http.StatusOK, patch(p, "/extra", map[string]any{"ok": true}))
	_, err := pool.Exec(t.Context(), `UPDATE nodes SET maintenance = true WHERE uuid = $1`, active)
	require.NoError(t, err)
	e.must(http.StatusOK, patch(p, "/pxe_enabled", false))
	e.must(http.StatusOK, patch(p, "/address", "52:54:00:00:00:02"))

	q := create(inspecting, "52:54:00:00:00:03")
	e.mustFail(http.StatusConflict, "Cannot update port \""+q+"\" on \""+inspecting.String()+"\" while it is in state \"inspecting\".",
		patch(q, "/extra", map[string]any{}))
}

// TestNodeDeleteRemovesPorts: deleting a node deletes its ports and port
// groups with it; a node Ironic refuses to delete keeps them.
func TestNodeDeleteRemovesPorts(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	_, nu := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "manageable"})
	_, keep := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "active"})
	g := e.must(http.StatusCreated, req{"POST", "/v1/portgroups", latest, "", map[string]any{"node_uuid": nu.String()}}).body
	e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:01", "node_uuid": nu.String(), "portgroup_uuid": g["uuid"]}})
	e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:02", "node_uuid": nu.String()}})
	e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:03", "node_uuid": keep.String()}})
	e.must(http.StatusConflict, req{"DELETE", "/v1/nodes/" + keep.String(), latest, "", nil})
	e.must(http.StatusNoContent, req{"DELETE", "/v1/nodes/" + nu.String(), latest, "", nil})
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM ports`))
	require.Equal(t, 0, dbtest.Count(t, pool, `SELECT count(*) FROM portgroups`))
}

// TestPortAccessRules: Ironic's default baremetal:port:* and
// baremetal:portgroup:* rules with scope enforced. System readers read
// everything and change nothing; a project sees the ports of nodes it owns
// or leases (others are 404 and absent from lists); creating and deleting
// need the owner's admin or manager role.
func TestPortAccessRules(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, true)
	_, mine := dbtest.Node(t, pool, dbtest.NodeSpec{Name: "mine", ProvisionState: "manageable", Owner: ptr(ownerProject), Lessee: ptr(lesseeProject)})
	_, theirs := dbtest.Node(t, pool, dbtest.NodeSpec{Name: "theirs", ProvisionState: "manageable", Owner: ptr(otherProject)})
	body := func(n uuid.UUID, mac string) map[string]any {
		return map[string]any{"address": mac, "node_uuid": n.String()}
	}

	e.mustFail(http.StatusForbidden, "Access was denied to the following resource: baremetal:port:create",
		req{"POST", "/v1/ports", latest, "owner", body(mine, "52:54:00:00:00:01")})
	e.must(http.StatusForbidden, req{"POST", "/v1/ports", latest, "system-reader", body(mine, "52:54:00:00:00:01")})
	e.must(http.StatusForbidden, req{"POST", "/v1/ports", latest, "owner-admin", body(theirs, "52:54:00:00:00:01")})
	p := e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "owner-admin", body(mine, "52:54:00:00:00:01")}).body["uuid"].(string)
	q := e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "system-admin", body(theirs, "52:54:00:00:00:02")}).body["uuid"].(string)
	e.must(http.StatusCreated, req{"POST", "/v1/portgroups", latest, "owner-admin", map[string]any{"node_uuid": mine.String(), "name": "pg-mine"}})
	e.must(http.StatusCreated, req{"POST", "/v1/portgroups", latest, "system-admin", map[string]any{"node_uuid": theirs.String(), "name": "pg-theirs"}})

	list := func(caller, path, key string) int {
		return len(items(t, e.must(http.StatusOK, req{"GET", path, latest, caller, nil}).body, key))
	}
	for _, c := range []struct {
		caller       string
		ports, small int
	}{{"system-admin", 2, 2}, {"system-reader", 2, 2}, {"owner", 1, 1}, {"lessee", 1, 1}, {"other", 1, 1}} {
		require.Equal(t, c.ports, list(c.caller, "/v1/ports", "ports"), c.caller)
		require.Equal(t, c.small, list(c.caller, "/v1/portgroups/detail", "portgroups"), c.caller)
	}
	require.Equal(t, 0, list("owner", "/v1/ports?address=52:54:00:00:00:02", "ports"))

	e.must(http.StatusOK, req{"GET", "/v1/ports/" + p, latest, "lessee", nil})
	e.must(http.StatusOK, req{"GET", "/v1/portgroups/pg-mine", latest, "lessee", nil})
	e.mustFail(http.StatusNotFound, "Port "+q+" could not be found.", req{"GET", "/v1/ports/" + q, latest, "owner", nil})
	e.mustFail(http.StatusNotFound, "Portgroup pg-theirs could not be found.", req{"GET", "/v1/portgroups/pg-theirs", latest, "owner", nil})
	e.mustFail(http.StatusNotFound, "Node theirs could not be found.", req{"GET", "/v1/nodes/theirs/ports", latest, "owner", nil})
	e.must(http.StatusOK, req{"GET", "/v1/nodes/mine/ports", latest, "lessee", nil})

	patch := []map[string]any{{"op": "add", "path": "/extra/x", "value": "y"}}
	e.must(http.StatusForbidden, req{"PATCH", "/v1/ports/" + p, latest, "lessee", patch})
	e.must(http.StatusForbidden, req{"PATCH", "/v1/ports/" + p, latest, "owner", patch})
	e.must(http.StatusForbidden, req{"PATCH", "/v1/ports/" + p, latest, "system-reader", patch})
	e.must(http.StatusOK, req{"PATCH", "/v1/ports/" + p, latest, "owner-admin", patch})
	e.must(http.StatusNotFound, req{"DELETE", "/v1/ports/" + q, latest, "owner-admin", nil})
	e.must(http.StatusForbidden, req{"DELETE", "/v1/ports/" + p, latest, "lessee", nil})
	e.must(http.StatusNoContent, req{"DELETE", "/v1/ports/" + p, latest, "owner-admin", nil})
	e.must(http.StatusForbidden, req{"DELETE", "/v1/portgroups/pg-mine", latest, "owner", nil})
	e.must(http.StatusNoContent, req{"DELETE", "/v1/portgroups/pg-mine", latest, "owner-admin", nil})
}

// TestPortMalformedRequests: malformed bodies, paths and queries are 4xx in
// Ironic's error body, never 5xx, and store nothing.
func TestPortMalformedRequests(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	_, nu := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "manageable"})
	n := nu.String()
	p := e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n}}).body["uuid"].(string)
	g := e.must(http.StatusCreated, req{"POST", "/v1/portgroups", latest, "", map[string]any{"node_uuid": n}}).body["uuid"].(string)
	for _, r := range []req{
		{"POST", "/v1/ports", latest, "", ""},
		{"POST", "/v1/ports", latest, "", "null"},
		{"POST", "/v1/ports", latest, "", "[]"},
		{"POST", "/v1/ports", latest, "", "{"},
		{"POST", "/v1/ports", latest, "", `{"address": 5, "node_uuid": "` + n + `"}`},
		{"POST", "/v1/ports", latest, "", `{"address": "52:54:00:00:00:02", "node_uuid": "` + n + `", "extra": {"a": "\u0000"}}`},
		{"POST", "/v1/ports", latest, "", `{"address": "52:54:00:00:00:02", "node_uuid": "` + n + `", "physical_network": "a\u0000"}`},
		{"POST", "/v1/ports", latest, "", `{"address": "52:54:00:00:00:02", "node_uuid": "` + n + `", "local_link_connection": {"port_id": 1}}`},
		{"POST", "/v1/portgroups", latest, "", `{"node_uuid": "` + n + `", "name": "a\u0000"}`},
		{"POST", "/v1/portgroups", latest, "", `{"node_uuid": "` + n + `", "extra": []}`},
		{"PATCH", "/v1/ports/" + p, latest, "", "{}"},
		{"PATCH", "/v1/ports/" + p, latest, "", `[{"op": "move", "path": "/extra"}]`},
		{"PATCH", "/v1/ports/" + p, latest, "", `[{"op": "add", "path": "/extra/a/b", "value": 1}]`},
		{"PATCH", "/v1/ports/" + p, latest, "", `[{"op": "replace", "path": "/node_uuid", "value": 7}]`},
		{"PATCH", "/v1/ports/" + p, latest, "", `[{"op": "replace", "path": "/portgroup_uuid", "value": "nope"}]`},
		{"PATCH", "/v1/ports/" + p, latest, "", `[{"op": "replace", "path": "/physical_network", "value": ""}]`},
		{"PATCH", "/v1/ports/" + p, latest, "", `[{"op": "replace", "path": "/local_link_connection", "value": {"x": 1}}]`},
		{"PATCH", "/v1/portgroups/" + g, latest, "", `[{"op": "replace", "path": "/name", "value": "bad name"}]`},
		{"PATCH", "/v1/portgroups/" + g, latest, "", `[{"op": "replace", "path": "/node_uuid", "value": "nope"}]`},
		{"PATCH", "/v1/portgroups/" + g, latest, "", `[{"op": "replace", "path": "/properties", "value": 1}]`},
		{"GET", "/v1/ports?marker=nope", latest, "", nil},
		{"GET", "/v1/ports?sort_dir=up", latest, "", nil},
		{"GET", "/v1/ports?detail=maybe", latest, "", nil},
		{"GET", "/v1/ports?node=bad%20name", latest, "", nil},
		{"GET", "/v1/ports?node_uuid=x", latest, "", nil},
		{"GET", "/v1/portgroups?sort_key=properties", latest, "", nil},
		{"GET", "/v1/portgroups?limit=-1", latest, "", nil},
		{"GET", "/v1/nodes/bad%20name/ports", latest, "", nil},
		{"DELETE", "/v1/ports/x", latest, "", nil},
	} {
		resp := e.do(r)
		require.True(t, resp.status >= 400 && resp.status < 500, "%s %s %v: %d %s", r.method, r.path, r.body, resp.status, resp.raw)
		require.NotEmpty(t, resp.fault(t), "%s %s", r.method, r.path)
	}
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM ports`))
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM portgroups`))
}

// TestPortConcurrentSameMAC: many clients creating a port with one MAC
// address (in different cases) on different nodes at once: exactly one is
// created, every other gets Ironic's 409.
func TestPortConcurrentSameMAC(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	const n = 12
	nodes := make([]uuid.UUID, n)
	for i := range nodes {
		_, nodes[i] = dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "manageable"})
	}
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mac := "52:54:00:00:00:aa"
			if i%2 == 1 {
				mac = strings.ToUpper(mac)
			}
			statuses <- e.do(req{"POST", "/v1/ports", latest, "", map[string]any{"address": mac, "node_uuid": nodes[i].String()}}).status
		}()
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	require.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusConflict: n - 1}, count)
}

// TestPortgroupPhysicalNetwork: the members of a port group share one
// physical network (the conductor's validate_port_physnet), on create and
// on patch.
func TestPortgroupPhysicalNetwork(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	_, nu := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "manageable"})
	n := nu.String()
	g := e.must(http.StatusCreated, req{"POST", "/v1/portgroups", latest, "", map[string]any{"node_uuid": n}}).body["uuid"].(string)
	e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:01", "node_uuid": n,
		"portgroup_uuid": g, "physical_network": "net1"}})
	e.mustFail(http.StatusConflict, "Port with physical network None cannot become a member of port group "+g+" which has ports in physical network net1.",
		req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:02", "node_uuid": n, "portgroup_uuid": g}})
	p := e.must(http.StatusCreated, req{"POST", "/v1/ports", latest, "", map[string]any{"address": "52:54:00:00:00:02", "node_uuid": n,
		"portgroup_uuid": g, "physical_network": "net1"}}).body["uuid"].(string)
	e.mustFail(http.StatusConflict, "Port with physical network net2 cannot become a member of port group "+g+" which has ports in physical network net1.",
		req{"PATCH", "/v1/ports/" + p, latest, "", []map[string]any{{"op": "replace", "path": "/physical_network", "value": "net2"}}})
	e.must(http.StatusOK, req{"PATCH", "/v1/ports/" + p, latest, "", []map[string]any{{"op": "add", "path": "/extra/x", "value": 1}}})
}

// TestPortOppositeMovesNoDeadlock: two clients move ports between the same
// two nodes in opposite directions at once, over and over. Each move holds
// the port's node and takes the other (a lower id with NOWAIT, so nobody
// waits against the lock order): every answer is 200 or a 409 to retry,
// never a 500, and PostgreSQL detects no deadlock.
func TestPortOppositeMovesNoDeadlock(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	e := setup(t, pool, false)
	_, a := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "manageable"})
	_, b := dbtest.Node(t, pool, dbtest.NodeSpec{ProvisionState: "manageable"})
	deadlocks := func() int {
		return dbtest.Count(t, pool, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`)
	}
	before := deadlocks()
	ports := make([]string, 2)
	for i, n := range []uuid.UUID{a, b} {
		r := e.do(req{"POST", "/v1/ports", latest, "", map[string]any{"address": fmt.Sprintf("52:54:00:00:01:%02x", i), "node_uuid": n.String()}})
		require.Equal(t, http.StatusCreated, r.status, string(r.raw))
		ports[i] = r.body["uuid"].(string)
	}
	var wg sync.WaitGroup
	statuses := make(chan int, 200)
	for i, route := range [][2]uuid.UUID{{b, a}, {a, b}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 40 {
				to := route[round%2]
				statuses <- e.do(req{"PATCH", "/v1/ports/" + ports[i], latest, "", []map[string]any{
					{"op": "replace", "path": "/node_uuid", "value": to.String()},
				}}).status
			}
		}()
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		require.Contains(t, []int{http.StatusOK, http.StatusConflict}, s)
	}
	require.Equal(t, before, deadlocks(), "PostgreSQL detected a deadlock")
}
