package node_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/node"
)

type op = map[string]any

func TestPatch(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("ok", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := e.createNode(map[string]any{"name": "p-ok", "extra": map[string]any{"a": 1, "b": 2},
			"driver_info": map[string]any{"ipmi_password": "pw"}})["uuid"].(string)
		r := e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/p-ok", "1.82", []op{
			{"op": "replace", "path": "/name", "value": "p-ok-2"},
			{"op": "add", "path": "/extra/c", "value": map[string]any{"d": true}},
			{"op": "remove", "path": "/extra/a"},
			{"op": "replace", "path": "/resource_class", "value": "gold"},
			{"op": "add", "path": "/properties/cpus", "value": 4},
			{"op": "replace", "path": "/description", "value": "hello"},
			{"op": "replace", "path": "/conductor_group", "value": "CG"},
			{"op": "replace", "path": "/maintenance", "value": "true"},
			{"op": "replace", "path": "/deploy_interface", "value": "fake"},
			{"op": "add", "path": "/driver_info/ipmi_username", "value": "admin"},
		})
		b := r.body
		require.Equal(t, id, b["uuid"])
		require.Equal(t, "p-ok-2", b["name"])
		require.Equal(t, map[string]any{"b": float64(2), "c": map[string]any{"d": true}}, b["extra"])
		require.Equal(t, "gold", b["resource_class"])
		require.Equal(t, map[string]any{"cpus": float64(4)}, b["properties"])
		require.Equal(t, "hello", b["description"])
		require.Equal(t, "cg", b["conductor_group"])
		require.Equal(t, true, b["maintenance"])
		// The stored password survives (it was masked only in the view).
		require.Equal(t, map[string]any{"ipmi_password": "******", "ipmi_username": "admin"}, b["driver_info"])
		require.NotNil(t, b["updated_at"])

		// Leaving maintenance by patch clears the reason.
		e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/maintenance", "1.82", map[string]any{"reason": "r"})
		b = e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "replace", "path": "/maintenance", "value": false}}).body
		require.Nil(t, b["maintenance_reason"])
		// remove resets to the empty value; interfaces to their default.
		b = e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{
			{"op": "remove", "path": "/description"}, {"op": "remove", "path": "/name"},
			{"op": "replace", "path": "/properties", "value": nil},
			{"op": "replace", "path": "/boot_interface", "value": nil},
		}).body
		require.Nil(t, b["description"])
		require.Nil(t, b["name"])
		require.Equal(t, map[string]any{}, b["properties"])
		require.Equal(t, "fake", b["boot_interface"])
	})

	t.Run("operation cap", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := e.createNode(map[string]any{"name": "p-cap"})["uuid"].(string)
		ops := func(n int) []op {
			out := make([]op, n)
			for i := range out {
				out[i] = op{"op": "add", "path": fmt.Sprintf("/extra/%d", i), "value": 0}
			}
			return out
		}
		b := e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+id, "1.82", ops(node.MaxPatchOps)).body
		require.Len(t, b["extra"], node.MaxPatchOps)
		r := e.must(http.StatusBadRequest, http.MethodPatch, "/v1/nodes/"+id, "1.82", ops(node.MaxPatchOps+1))
		require.Equal(t, fmt.Sprintf("Schema error for patch: %d operations is too many; a patch may have at most %d",
			node.MaxPatchOps+1, node.MaxPatchOps), r.fault(t))
	})

	t.Run("instance_uuid", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := e.availableNode(map[string]any{})
		inst := uuid.NewString()
		b := e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "add", "path": "/instance_uuid", "value": inst}}).body
		require.Equal(t, inst, b["instance_uuid"])
		r := e.must(http.StatusConflict, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "replace", "path": "/instance_uuid", "value": uuid.NewString()}})
		require.Equal(t, "Node "+id+" is associated with instance "+inst+".", r.fault(t))
		b = e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "remove", "path": "/instance_uuid"}}).body
		require.Nil(t, b["instance_uuid"])
		r = e.must(http.StatusBadRequest, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "add", "path": "/instance_uuid", "value": "x"}})
		require.Equal(t, "Expected UUID for instance_uuid: x", r.fault(t))
	})

	t.Run("removing instance_uuid drops the allocation", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		// available (an allowed state): the allocation goes.
		id := e.availableNode(map[string]any{})
		au := e.allocate(id)
		require.Equal(t, au.String(), e.getNode(id)["allocation_uuid"])
		b := e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "remove", "path": "/instance_uuid"}}).body
		require.Nil(t, b["instance_uuid"])
		require.Nil(t, b["allocation_uuid"])
		require.False(t, e.allocationExists(au))

		// active and not in maintenance: refused, nothing changes.
		id = e.activeNode(map[string]any{})
		au = e.allocate(id)
		r := e.must(http.StatusConflict, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "replace", "path": "/instance_uuid", "value": nil}})
		require.Equal(t, "Node "+id+" with an allocation can not have instance_uuid removed unless it is in one of allowed (enroll, inspecting, inspect wait, manageable, available) states or in maintenance mode.", r.fault(t))
		require.True(t, e.allocationExists(au))
		require.Equal(t, au.String(), e.getNode(id)["instance_uuid"])

		// active in maintenance: allowed, the allocation goes.
		e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/maintenance", "1.82", nil)
		b = e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "remove", "path": "/instance_uuid"}}).body
		require.Nil(t, b["allocation_uuid"])
		require.False(t, e.allocationExists(au))
		require.Equal(t, "active", b["provision_state"])
	})

	t.Run("state rules", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := e.activeNode(map[string]any{"resource_class": "gold"})
		r := e.must(http.StatusConflict, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "replace", "path": "/resource_class", "value": "x"}})
		require.Contains(t, r.fault(t), "can not have resource_class updated unless it is in one of allowed")
		r = e.must(http.StatusConflict, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "replace", "path": "/bios_interface", "value": "no-bios"}})
		require.Equal(t, "Node "+id+" can not have bios_interface updated unless it is in one of allowed (enroll, inspecting, inspect wait, manageable, available) states or in maintenance mode.", r.fault(t))
		_ = e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "replace", "path": "/protected", "value": true},
			{"op": "replace", "path": "/protected_reason", "value": "prod"}})
		require.Equal(t, "prod", e.getNode(id)["protected_reason"])
		avail := e.availableNode(map[string]any{})
		r = e.must(http.StatusConflict, http.MethodPatch, "/v1/nodes/"+avail, "1.82", []op{{"op": "replace", "path": "/protected", "value": true}})
		require.Equal(t, "Node "+avail+" can only be made protected in provision states 'active' or 'rescue', the current state is 'available'", r.fault(t))
		r = e.must(http.StatusBadRequest, http.MethodPatch, "/v1/nodes/"+avail, "1.82", []op{{"op": "replace", "path": "/protected_reason", "value": "x"}})
		require.Equal(t, "The protected_reason field can only be set when protected is True", r.fault(t))
		r = e.must(http.StatusConflict, http.MethodPatch, "/v1/nodes/"+avail, "1.82", []op{{"op": "replace", "path": "/retired", "value": true}})
		require.Contains(t, r.fault(t), "can not have 'retired' set in provision state 'available'")
	})

	t.Run("bad requests", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := e.createNode(map[string]any{"name": "p-bad"})["uuid"].(string)
		allowed := "automated_clean, bios_interface, boot_interface, chassis_uuid, conductor_group, console_interface, deploy_interface, description, driver, driver_info, extra, inspect_interface, instance_info, instance_uuid, lessee, maintenance, management_interface, name, network_data, network_interface, owner, power_interface, properties, protected, protected_reason, raid_interface, rescue_interface, resource_class, retired, retired_reason, shard, storage_interface, vendor_interface"
		cases := []struct {
			name    string
			version string
			body    any
			status  int
			msg     string
		}{
			{"uuid", "1.82", []op{{"op": "replace", "path": "/uuid", "value": uuid.NewString()}}, 400, "Cannot patch /uuid. Only the following can be updated: " + allowed},
			{"provision_state", "1.82", []op{{"op": "replace", "path": "/provision_state", "value": "active"}}, 400, "Cannot patch /provision_state."},
			{"power_state", "1.82", []op{{"op": "replace", "path": "/power_state", "value": "power on"}}, 400, "Cannot patch /power_state."},
			{"allocation_uuid", "1.82", []op{{"op": "replace", "path": "/allocation_uuid", "value": uuid.NewString()}}, 400, "Cannot patch /allocation_uuid."},
			{"traits", "1.82", []op{{"op": "add", "path": "/traits", "value": []string{"CUSTOM_X"}}}, 400, "Cannot patch /traits."},
			{"created_at", "1.82", []op{{"op": "remove", "path": "/created_at"}}, 400, "Cannot patch /created_at."},
			{"reservation", "1.82", []op{{"op": "remove", "path": "/reservation"}}, 400, "Cannot patch /reservation."},
			{"links", "1.82", []op{{"op": "remove", "path": "/links"}}, 400, "Cannot patch /links."},
			{"move op", "1.82", []op{{"op": "move", "from": "/name", "path": "/description"}}, 400, "Schema error for patch: "},
			{"test op", "1.82", []op{{"op": "test", "path": "/name", "value": "x"}}, 400, "Schema error for patch: 'test' is not one of ['add', 'replace', 'remove']"},
			{"bad path", "1.82", []op{{"op": "add", "path": "name", "value": "x"}}, 400, `Schema error for patch: 'name' does not match '^(/[\\w-]+)+$'`},
			{"not a list", "1.82", op{"op": "add", "path": "/name"}, 400, "is not of type 'array'"},
			{"missing path", "1.82", []op{{"op": "add"}}, 400, "Schema error for patch: 'path' is a required property"},
			{"remove missing", "1.82", []op{{"op": "remove", "path": "/extra/nope"}}, 400,
				"Couldn't apply patch '{'op': 'remove', 'path': '/extra/nope'}'. Reason: can't remove a non-existent object 'nope'"},
			{"missing parent", "1.82", []op{{"op": "add", "path": "/extra/a/b", "value": 1}}, 400, "Couldn't apply patch"},
			{"no value", "1.82", []op{{"op": "replace", "path": "/name"}}, 400, "The operation does not contain a 'value' member"},
			{"properties not object", "1.82", []op{{"op": "replace", "path": "/properties", "value": "x"}}, 400,
				"Schema error for patch: 'x' is not of type 'object', 'null'"},
			{"long resource class", "1.82", []op{{"op": "replace", "path": "/resource_class", "value": strings.Repeat("r", 81)}}, 400, "is too long"},
			{"long description", "1.82", []op{{"op": "replace", "path": "/description", "value": strings.Repeat("d", 4097)}}, 400,
				"Cannot update node with description exceeding 4096 characters"},
			{"bad name", "1.82", []op{{"op": "replace", "path": "/name", "value": "a b"}}, 400, "Node " + id + ": Cannot change name to invalid name 'a b'"},
			{"reserved name", "1.82", []op{{"op": "replace", "path": "/name", "value": "states"}}, 400, "The word \"states\" is reserved"},
			{"driver missing", "1.82", []op{{"op": "remove", "path": "/driver"}}, 400, "Schema error for patch: 'driver' is a required property"},
			{"bad bool", "1.82", []op{{"op": "replace", "path": "/maintenance", "value": "sure"}}, 400, "Invalid maintenance: Unrecognized value 'sure'"},
			{"owner too new", "1.49", []op{{"op": "replace", "path": "/owner", "value": "p"}}, 406, "Request not acceptable."},
			{"shard too new", "1.81", []op{{"op": "replace", "path": "/shard", "value": "s"}}, 406, ""},
			{"reset_interfaces without driver", "1.82", []op{{"op": "replace", "path": "/name", "value": "zz"}}, 400,
				"The reset_interfaces parameter can only be used when changing the node's driver."},
			{"chassis", "1.82", []op{{"op": "replace", "path": "/chassis_uuid", "value": uuid.NewString()}}, 400, "could not be found."},
			{"bad interface", "1.82", []op{{"op": "replace", "path": "/power_interface", "value": "redfish"}}, 400, "Valid interfaces are ['fake', 'ipmitool']."},
		}
		for _, tc := range cases {
			path := "/v1/nodes/" + id
			if strings.HasPrefix(tc.name, "reset_interfaces") {
				path += "?reset_interfaces=true"
			}
			r := e.must(tc.status, http.MethodPatch, path, tc.version, tc.body)
			if tc.msg != "" {
				require.Contains(t, r.fault(t), tc.msg, tc.name)
			}
		}
		// Nothing changed.
		b := e.getNode(id)
		require.Equal(t, "p-bad", b["name"])
		require.Nil(t, b["owner"])
		missing := uuid.NewString()
		r := e.must(http.StatusNotFound, http.MethodPatch, "/v1/nodes/"+missing, "1.82", []op{{"op": "replace", "path": "/name", "value": "x"}})
		require.Equal(t, "Node "+missing+" could not be found.", r.fault(t))
		other := e.createNode(map[string]any{"name": "p-taken"})
		_ = other
		r = e.must(http.StatusConflict, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "replace", "path": "/name", "value": "p-taken"}})
		require.Equal(t, "A node with name p-taken already exists.", r.fault(t))
	})
}
