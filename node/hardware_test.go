package node_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/node"
)

// TestValidate checks GET /v1/nodes/{ident}/validate (and the older
// /v1/nodes/validate?node=) against what Ironic 21.4 answers: every
// interface valid for a fake-hardware node; for an ipmi node the no-*
// interfaces unsupported and ipxe boot and direct deploy wanting a port
// (then their driver_info and instance_info keys).
func TestValidate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	fake := e.createNode(map[string]any{"name": "v-fake"})["uuid"].(string)
	r := e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+fake+"/validate", "1.82", nil)
	require.Len(t, r.body, 11)
	for iface, res := range r.body {
		require.Equal(t, map[string]any{"result": true}, res, iface)
	}
	e.must(http.StatusOK, http.MethodGet, "/v1/nodes/v-fake/validate", "1.5", nil)
	e.must(http.StatusOK, http.MethodGet, "/v1/nodes/validate?node=v-fake", "1.82", nil)
	e.must(http.StatusOK, http.MethodGet, "/v1/nodes/validate?node_uuid="+fake, "1.82", nil)
	require.Equal(t, "Request not acceptable.", e.must(http.StatusNotAcceptable, http.MethodGet, "/v1/nodes/v-fake/validate", "1.1", nil).fault(t))
	require.Equal(t, "Unexpected arguments: x", e.must(http.StatusBadRequest, http.MethodGet, "/v1/nodes/v-fake/validate?x=1", "1.82", nil).fault(t))
	require.Equal(t, "Node nope could not be found.", e.must(http.StatusNotFound, http.MethodGet, "/v1/nodes/nope/validate", "1.82", nil).fault(t))

	ipmi := e.createNode(map[string]any{"driver": "ipmi", "raid_interface": "agent"})["uuid"].(string)
	r = e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+ipmi+"/validate", "1.82", nil)
	noPort := map[string]any{"result": false, "reason": "Node " + ipmi + " does not have any port associated with it"}
	require.Equal(t, noPort, r.body["boot"])
	require.Equal(t, noPort, r.body["deploy"])
	require.Equal(t, map[string]any{"result": false, "reason": "Missing the following IPMI credentials in node's driver_info: ['ipmi_address']."},
		r.body["power"])
	require.Equal(t, map[string]any{"result": false, "reason": "Driver ipmi does not support rescue (disabled or not implemented)."},
		r.body["rescue"])
	require.Equal(t, map[string]any{"result": true}, r.body["raid"])
	require.Equal(t, map[string]any{"result": true}, r.body["network"])

	addPort(t, e, ipmi, "52:54:00:00:00:01", nil)
	e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+ipmi, "1.82", []map[string]any{
		{"op": "add", "path": "/driver_info/ipmi_address", "value": "10.0.0.1"},
		{"op": "add", "path": "/driver_info/deploy_kernel", "value": "http://k"}})
	r = e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+ipmi+"/validate", "1.82", nil)
	require.Equal(t, map[string]any{"result": true}, r.body["power"])
	require.Equal(t, "Cannot validate PXE bootloader. Some parameters were missing in node's driver_info and configuration. Missing are: ['deploy_ramdisk']",
		r.body["boot"].(map[string]any)["reason"])
	require.Equal(t, "Node "+ipmi+" failed to validate deploy image info. Some parameters were missing. Missing are: ['instance_info.image_source']",
		r.body["deploy"].(map[string]any)["reason"])
}

// addPort inserts a port of node (a uuid) with address, in port group
// group when not nil, and returns the port's uuid.
func addPort(t *testing.T, e *env, nodeUUID, address string, group *int64) uuid.UUID {
	t.Helper()
	u := uuid.New()
	_, err := e.pool.Exec(t.Context(), `INSERT INTO ports (uuid, address, node_id, portgroup_id)
		SELECT $1, $2, id, $4 FROM nodes WHERE uuid = $3`, u, address, nodeUUID, group)
	require.NoError(t, err)
	return u
}

// TestRAID checks PUT /v1/nodes/{ident}/states/raid with the fake and agent
// RAID interfaces: a configuration valid against Ironic's RAID schema is
// stored and shown as target_raid_config, an invalid one is refused with
// python-jsonschema's words, {} clears it; no-raid refuses with 404.
func TestRAID(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, iface := range []string{"fake", "agent"} {
		id := e.createNode(map[string]any{"raid_interface": iface})["uuid"].(string)
		cfg := map[string]any{"logical_disks": []any{map[string]any{"size_gb": 100, "raid_level": "5",
			"is_root_volume": true, "disk_type": "hdd", "number_of_physical_disks": 5}}}
		e.must(http.StatusNoContent, http.MethodPut, "/v1/nodes/"+id+"/states/raid", "1.50", cfg)
		require.Equal(t, map[string]any{"logical_disks": []any{map[string]any{"size_gb": 100.0, "raid_level": "5",
			"is_root_volume": true, "disk_type": "hdd", "number_of_physical_disks": 5.0}}}, e.getNode(id)["target_raid_config"])
		for body, want := range map[string]string{
			`{"logical_disks":[{"size_gb":-1,"raid_level":"1"}]}`:    "RAID config validation error: -1 is less than the minimum of 0",
			`{"logical_disks":[{"size_gb":"MAX","raid_level":"7"}]}`: "RAID config validation error: '7' is not one of ['JBOD', '0', '1', '2', '5', '6', '1+0', '5+0', '6+0']",
			`{"logical_disks":[]}`:                                   "RAID config validation error: [] is too short",
			`{"foo":1}`:                                              "RAID config validation error: 'logical_disks' is a required property",
			`{"logical_disks":[{"size_gb":1,"raid_level":"1","physical_disks":["a"]}]}`:                                                     "RAID config validation error: 'controller' is a dependency of 'physical_disks'",
			`{"logical_disks":[{"size_gb":1,"raid_level":"1","is_root_volume":true},{"size_gb":1,"raid_level":"1","is_root_volume":true}]}`: "Raid config cannot have more than one root volume. 2 root volumes were specified",
		} {
			require.Equal(t, want, e.must(http.StatusBadRequest, http.MethodPut, "/v1/nodes/"+id+"/states/raid", "1.82", body).fault(t), body)
		}
		e.must(http.StatusNoContent, http.MethodPut, "/v1/nodes/"+id+"/states/raid", "1.82", `{}`)
		require.Equal(t, map[string]any{}, e.getNode(id)["target_raid_config"])
	}
	id := e.createNode(map[string]any{"raid_interface": "no-raid"})["uuid"].(string)
	require.Equal(t, "Driver fake-hardware does not support raid (disabled or not implemented).",
		e.must(http.StatusNotFound, http.MethodPut, "/v1/nodes/"+id+"/states/raid", "1.82",
			`{"logical_disks":[{"size_gb":1,"raid_level":"1"}]}`).fault(t))
}

// TestFakeManagement checks boot devices, indicators and vendor methods of
// the fake management and vendor interfaces, as Ironic's fake ones answer.
func TestFakeManagement(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createNode(map[string]any{"name": "mgmt"})["uuid"].(string)
	base := "/v1/nodes/" + id
	require.JSONEq(t, `{"boot_device":"pxe","persistent":false}`,
		string(e.must(http.StatusOK, http.MethodGet, base+"/management/boot_device", "1.82", nil).raw))
	require.JSONEq(t, `{"supported_boot_devices":["pxe"]}`,
		string(e.must(http.StatusOK, http.MethodGet, base+"/management/boot_device/supported", "1.82", nil).raw))
	e.must(http.StatusNoContent, http.MethodPut, base+"/management/boot_device", "1.82", `{"boot_device":"pxe","persistent":true}`)
	require.Equal(t, "Invalid boot device cdrom specified.",
		e.must(http.StatusBadRequest, http.MethodPut, base+"/management/boot_device", "1.82", `{"boot_device":"cdrom"}`).fault(t))

	r := e.must(http.StatusOK, http.MethodGet, "/v1/nodes/mgmt/management/indicators", "1.82", nil)
	require.JSONEq(t, `{"indicators":[
		{"name":"led-0@chassis","component":"chassis","readonly":true,"states":["off","on"],"links":[
			{"href":"http://metalloc.test:6385/v1/nodes/mgmt/management/indicators/led-0@chassis","rel":"self"},
			{"href":"http://metalloc.test:6385/nodes/mgmt/management/indicators/led-0@chassis","rel":"bookmark"}]},
		{"name":"led@system","component":"system","readonly":false,"states":["blinking","off","on"],"links":[
			{"href":"http://metalloc.test:6385/v1/nodes/mgmt/management/indicators/led@system","rel":"self"},
			{"href":"http://metalloc.test:6385/nodes/mgmt/management/indicators/led@system","rel":"bookmark"}]}]}`, string(r.raw))
	require.JSONEq(t, `{"state":"on"}`, string(e.must(http.StatusOK, http.MethodGet, base+"/management/indicators/led@system", "1.82", nil).raw))
	for path, want := range map[string]string{
		"/management/indicators/led":          `Malformed indicator name "led"`,
		"/management/indicators/led@disk":     "Invalid component disk specified.",
		"/management/indicators/led-9@system": "Invalid indicator led-9 specified.",
	} {
		require.Equal(t, want, e.must(http.StatusBadRequest, http.MethodGet, base+path, "1.82", nil).fault(t), path)
	}
	require.Equal(t, "Driver fake-hardware does not support set_indicator_state (disabled or not implemented).",
		e.must(http.StatusBadRequest, http.MethodPut, base+"/management/indicators/led@system", "1.82", `{"state":"on"}`).fault(t))

	methods := e.must(http.StatusOK, http.MethodGet, base+"/vendor_passthru/methods", "1.82", nil).body
	require.Len(t, methods, 3)
	require.Equal(t, false, methods["third_method_sync"].(map[string]any)["async"])
	e.must(http.StatusAccepted, http.MethodPost, base+"/vendor_passthru?method=second_method", "1.82", `{"bar":"x"}`)
	require.JSONEq(t, "true", string(e.must(http.StatusOK, http.MethodPost, base+"/vendor_passthru/third_method_sync", "1.82", `{"bar":"meow"}`).raw))
	require.Equal(t, "Parameter 'bar' not passed to method 'third_method_sync'.",
		e.must(http.StatusBadRequest, http.MethodPost, base+"/vendor_passthru/third_method_sync", "1.82", `{}`).fault(t))
	require.Equal(t, "The method third_method_sync does not support HTTP GET",
		e.must(http.StatusBadRequest, http.MethodGet, base+"/vendor_passthru/third_method_sync", "1.82", nil).fault(t))
	require.Equal(t, "No handler for method first_method",
		e.must(http.StatusBadRequest, http.MethodPost, base+"/vendor_passthru/first_method", "1.82", `{"bar":"x"}`).fault(t))
}

// TestVIFs checks /v1/nodes/{ident}/vifs: with the noop network interface
// attach and detach succeed and record nothing; with flat a VIF goes to a
// free port group, then to a PXE-enabled port, recorded in its
// internal_info, with Ironic's 409 and 400s.
func TestVIFs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	noop := e.createNode(map[string]any{})["uuid"].(string)
	vif := uuid.NewString()
	e.must(http.StatusNoContent, http.MethodPost, "/v1/nodes/"+noop+"/vifs", "1.82", map[string]any{"id": vif})
	require.JSONEq(t, `{"vifs":[]}`, string(e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+noop+"/vifs", "1.82", nil).raw))
	e.must(http.StatusNoContent, http.MethodDelete, "/v1/nodes/"+noop+"/vifs/"+vif, "1.82", nil)
	for body, want := range map[string]string{
		`{"idx":"a"}`:  "Schema error for vif: 'id' is a required property",
		``:             "Schema error for vif: 'id' is a required property",
		`{"id":"a b"}`: "Expected UUID or name for id: a b",
		`{"id":"a","port_uuid":"x","portgroup_uuid":"y"}`: "Cannot specify both port_uuid and portgroup_uuid",
	} {
		require.Equal(t, want, e.must(http.StatusBadRequest, http.MethodPost, "/v1/nodes/"+noop+"/vifs", "1.82", body).fault(t), body)
	}
	e.must(http.StatusNotFound, http.MethodPost, "/v1/nodes/"+noop+"/vifs", "1.27", map[string]any{"id": vif})

	flat := e.createNode(map[string]any{"network_interface": "flat"})["uuid"].(string)
	require.Equal(t, "Unable to attach VIF "+vif+", not enough free physical ports.",
		e.must(http.StatusBadRequest, http.MethodPost, "/v1/nodes/"+flat+"/vifs", "1.82", map[string]any{"id": vif}).fault(t))
	var groupID int64
	groupUUID := uuid.New()
	require.NoError(t, e.pool.QueryRow(t.Context(), `INSERT INTO portgroups (uuid, node_id)
		SELECT $1, id FROM nodes WHERE uuid = $2 RETURNING id`, groupUUID, flat).Scan(&groupID))
	addPort(t, e, flat, "52:54:00:00:01:01", &groupID)
	p2 := addPort(t, e, flat, "52:54:00:00:01:02", nil)
	e.must(http.StatusNoContent, http.MethodPost, "/v1/nodes/"+flat+"/vifs", "1.82", map[string]any{"id": vif})
	require.Equal(t, "Unable to attach VIF because VIF "+vif+" is already attached to Ironic Portgroup "+groupUUID.String(),
		e.must(http.StatusConflict, http.MethodPost, "/v1/nodes/"+flat+"/vifs", "1.82", map[string]any{"id": vif}).fault(t))
	e.must(http.StatusNoContent, http.MethodPost, "/v1/nodes/"+flat+"/vifs", "1.82", map[string]any{"id": "second"})
	require.JSONEq(t, `{"vifs":[{"id":"second"},{"id":"`+vif+`"}]}`,
		string(e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+flat+"/vifs", "1.82", nil).raw))
	var info string
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT internal_info->>'tenant_vif_port_id' FROM ports WHERE uuid = $1`, p2).Scan(&info))
	require.Equal(t, "second", info)
	require.Equal(t, "Unable to attach VIF third, not enough free physical ports.",
		e.must(http.StatusBadRequest, http.MethodPost, "/v1/nodes/"+flat+"/vifs", "1.82", map[string]any{"id": "third"}).fault(t))
	e.must(http.StatusNoContent, http.MethodDelete, "/v1/nodes/"+flat+"/vifs/second", "1.82", nil)
	require.Equal(t, "Unable to detach VIF second from node "+flat+" because it is not attached to it.",
		e.must(http.StatusBadRequest, http.MethodDelete, "/v1/nodes/"+flat+"/vifs/second", "1.82", nil).fault(t))
	require.JSONEq(t, `{"vifs":[{"id":"`+vif+`"}]}`,
		string(e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+flat+"/vifs", "1.82", nil).raw))
}

// failingDriver fails every power action.
type failingDriver struct{ node.FakeDriver }

func (failingDriver) SetPower(context.Context, *node.Node, string) error {
	return errors.New("BMC unreachable")
}

// TestHistory checks that the failures Ironic records land in
// /v1/nodes/{ident}/history with last_error's text, that a successful
// transition records nothing, and the list's detail, paging and one-event
// reads.
func TestHistory(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createNode(map[string]any{})["uuid"].(string)
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/states/provision", "1.82", `{"target":"manage"}`)
	require.JSONEq(t, `{"history":[]}`, string(e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+id+"/history", "1.82", nil).raw))

	for range 2 {
		_, err := e.store.SetPowerState(t.Context(), id, node.PowerOn, failingDriver{})
		require.NoError(t, err)
	}
	want := "Failed to change power state to 'power on' by 'power on': BMC unreachable"
	require.Equal(t, want, e.getNode(id)["last_error"])
	r := e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+id+"/history?limit=1", "1.82", nil)
	list := r.body["history"].([]any)
	require.Len(t, list, 1)
	ev := list[0].(map[string]any)
	require.Equal(t, want, ev["event"])
	require.Equal(t, "ERROR", ev["severity"])
	require.NotContains(t, ev, "event_type")
	require.Contains(t, r.body["next"], "/v1/nodes/"+id+"/history?limit=1&marker="+ev["uuid"].(string))
	detail := e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+id+"/history?detail=true&marker="+ev["uuid"].(string), "1.82", nil)
	require.Len(t, detail.body["history"], 1)
	second := detail.body["history"].([]any)[0].(map[string]any)
	require.Equal(t, "UNKNOWN", second["event_type"])
	require.NotEqual(t, ev["uuid"], second["uuid"])
	one := e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+id+"/history/"+ev["uuid"].(string), "1.82", nil).body
	require.Equal(t, want, one["event"])
	require.Contains(t, one, "conductor")

	// An aborted inspection is recorded as Ironic records it.
	_, err := e.pool.Exec(t.Context(), `UPDATE nodes SET provision_state = 'inspect wait' WHERE uuid = $1`, id)
	require.NoError(t, err)
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/states/provision", "1.82", `{"target":"abort"}`)
	r = e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+id+"/history?detail=1", "1.82", nil)
	list = r.body["history"].([]any)
	require.Len(t, list, 3)
	last := list[2].(map[string]any)
	require.Equal(t, "Inspection was aborted by request.", last["event"])
	require.Equal(t, "introspection", last["event_type"])
}

// TestShards checks GET /v1/shards (1.82): shards by node count, largest
// first, nodes in none under "None", as Ironic lists them.
func TestShards(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.createNode(map[string]any{"shard": "s1"})
	e.createNode(map[string]any{"shard": "s1"})
	e.createNode(map[string]any{})
	require.JSONEq(t, `{"shards":[{"name":"s1","count":2},{"name":"None","count":1}]}`,
		string(e.must(http.StatusOK, http.MethodGet, "/v1/shards", "1.82", nil).raw))
	require.Equal(t, "The API version does not allow shards", e.must(http.StatusNotFound, http.MethodGet, "/v1/shards", "1.81", nil).fault(t))
	e.must(http.StatusNotFound, http.MethodGet, "/v1/shards/s1", "1.82", nil)
	e.must(http.StatusMethodNotAllowed, http.MethodPost, "/v1/shards", "1.82", `{}`)
}

// TestVIFAttachRace attaches 12 VIFs at once to a flat node with 4 ports:
// exactly 4 are attached, each to its own port, and the others are refused
// (the node's row lock serializes the choice of a free port).
func TestVIFAttachRace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createNode(map[string]any{"network_interface": "flat"})["uuid"].(string)
	for i := range 4 {
		addPort(t, e, id, fmt.Sprintf("52:54:00:00:02:%02x", i), nil)
	}
	var wg sync.WaitGroup
	statuses := make([]int, 12)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = e.do(http.MethodPost, "/v1/nodes/"+id+"/vifs", "1.82", map[string]any{"id": fmt.Sprintf("vif-%d", i)}).status
		}()
	}
	wg.Wait()
	attached := 0
	for _, st := range statuses {
		require.Contains(t, []int{http.StatusNoContent, http.StatusBadRequest}, st)
		if st == http.StatusNoContent {
			attached++
		}
	}
	require.Equal(t, 4, attached)
	var ports, distinct int
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT internal_info->>'tenant_vif_port_id')
		FROM ports p JOIN nodes n ON n.id = p.node_id WHERE n.uuid = $1 AND internal_info ? 'tenant_vif_port_id'`, id).Scan(&ports, &distinct))
	require.Equal(t, 4, ports)
	require.Equal(t, 4, distinct)
}
