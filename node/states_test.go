package node_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// provision requests a provision target and requires the status.
func (e *env) provision(status int, id, version string, body map[string]any) response {
	e.t.Helper()
	return e.must(status, http.MethodPut, "/v1/nodes/"+id+"/states/provision", version, body)
}

func (e *env) state(id string) string {
	e.t.Helper()
	return e.getNode(id)["provision_state"].(string)
}

func TestProvisionStateMachine(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("lifecycle", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := e.createNode(map[string]any{"name": "life"})["uuid"].(string)
		before := e.getNode(id)["provision_updated_at"]

		r := e.provision(http.StatusAccepted, "life", "1.82", map[string]any{"target": "manage"})
		require.Equal(t, "http://metalloc.test:6385/v1/nodes/life/states", r.header.Get("Location"))
		require.Empty(t, r.raw)
		require.Equal(t, "manageable", e.state(id))
		require.NotEqual(t, before, e.getNode(id)["provision_updated_at"])

		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "provide"})
		require.Equal(t, "available", e.state(id))
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "manage"})
		require.Equal(t, "manageable", e.state(id))
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "inspect"})
		require.Equal(t, "manageable", e.state(id))
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "clean",
			"clean_steps": []any{map[string]any{"interface": "deploy", "step": "erase_devices"}}})
		require.Equal(t, "manageable", e.state(id))
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "provide"})

		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "active",
			"configdrive": "aGVsbG8="})
		n := e.getNode(id)
		require.Equal(t, "active", n["provision_state"])
		require.Nil(t, n["target_provision_state"])
		require.Equal(t, "******", n["instance_info"].(map[string]any)["configdrive"])
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "rebuild"})
		require.Equal(t, "active", e.state(id))
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "rescue", "rescue_password": "pw"})
		require.Equal(t, "rescue", e.state(id))
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "unrescue"})
		require.Equal(t, "active", e.state(id))

		au := e.allocate(id)
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "deleted"})
		n = e.getNode(id)
		require.Equal(t, "available", n["provision_state"])
		require.Nil(t, n["instance_uuid"])
		require.Nil(t, n["allocation_uuid"])
		require.Equal(t, map[string]any{}, n["instance_info"])
		require.False(t, e.allocationExists(au))
		require.EqualValues(t, 1, e.remover.calls.Load())

		// 1.73 verbs.
		e.provision(http.StatusAccepted, id, "1.73", map[string]any{"target": "deploy"})
		require.Equal(t, "active", e.state(id))
		e.provision(http.StatusAccepted, id, "1.73", map[string]any{"target": "undeploy"})
		require.Equal(t, "available", e.state(id))
		// adopt
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "manage"})
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "adopt"})
		require.Equal(t, "active", e.state(id))
	})

	t.Run("invalid transitions", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := e.createNode(map[string]any{})["uuid"].(string)
		for _, target := range []string{"provide", "active", "deleted", "rebuild", "inspect", "adopt", "abort", "unrescue", "bogus"} {
			r := e.provision(http.StatusBadRequest, id, "1.82", map[string]any{"target": target})
			require.Equal(t, "The requested action \""+target+"\" can not be performed on node \""+id+"\" while it is in state \"enroll\".", r.fault(t))
		}
		require.Equal(t, "enroll", e.state(id))
		avail := e.availableNode(map[string]any{})
		for _, target := range []string{"provide", "deleted", "rebuild", "inspect", "clean", "rescue", "abort"} {
			body := map[string]any{"target": target}
			if target == "rescue" {
				body["rescue_password"] = "x"
			}
			if target == "clean" {
				body["clean_steps"] = []any{map[string]any{"interface": "deploy", "step": "s"}}
			}
			r := e.provision(http.StatusBadRequest, avail, "1.82", body)
			require.Contains(t, r.fault(t), "while it is in state \"available\".")
		}
		active := e.activeNode(map[string]any{})
		for _, target := range []string{"manage", "provide", "active", "deploy", "inspect", "adopt"} {
			e.provision(http.StatusBadRequest, active, "1.82", map[string]any{"target": target})
		}
		missing := uuid.NewString()
		r := e.provision(http.StatusNotFound, missing, "1.82", map[string]any{"target": "manage"})
		require.Equal(t, "Node "+missing+" could not be found.", r.fault(t))
	})

	t.Run("arguments and versions", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := e.createNode(map[string]any{})["uuid"].(string)
		e.provision(http.StatusNotAcceptable, id, "1.3", map[string]any{"target": "manage"})
		require.Equal(t, "enroll", e.state(id))
		r := e.provision(http.StatusBadRequest, id, "1.82", map[string]any{})
		require.Equal(t, "Missing mandatory parameter: target", r.fault(t))
		r = e.provision(http.StatusBadRequest, id, "1.82", map[string]any{"target": "manage", "colour": "red"})
		require.Equal(t, "Unexpected arguments: colour", r.fault(t))
		e.provision(http.StatusAccepted, id, "1.4", map[string]any{"target": "manage"})
		r = e.provision(http.StatusBadRequest, id, "1.82", map[string]any{"target": "clean"})
		require.Equal(t, "\"clean_steps\" is required when setting target provision state to clean", r.fault(t))
		r = e.provision(http.StatusBadRequest, id, "1.82", map[string]any{"target": "clean", "clean_steps": []any{map[string]any{"step": "x"}}})
		require.Contains(t, r.fault(t), "Invalid clean_steps: 'interface' is a required property")
		r = e.provision(http.StatusBadRequest, id, "1.82", map[string]any{"target": "provide", "clean_steps": []any{map[string]any{"interface": "deploy", "step": "x"}}})
		require.Equal(t, "\"clean_steps\" is only valid when setting target provision state to clean", r.fault(t))
		e.provision(http.StatusNotAcceptable, id, "1.14", map[string]any{"target": "clean", "clean_steps": []any{}})
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "provide"})
		e.provision(http.StatusNotAcceptable, id, "1.72", map[string]any{"target": "deploy"})
		r = e.provision(http.StatusBadRequest, id, "1.82", map[string]any{"target": "active", "configdrive": "not base64!"})
		require.Equal(t, "Invalid configdrive format: it is neither a JSON, nor a URL, nor a base64 string", r.fault(t))
		r = e.provision(http.StatusBadRequest, id, "1.55", map[string]any{"target": "active", "configdrive": map[string]any{"meta_data": map[string]any{}}})
		require.Contains(t, r.fault(t), "only supported starting with API version 1.56")
		r = e.provision(http.StatusBadRequest, id, "1.82", map[string]any{"target": "manage", "configdrive": "abc"})
		require.Equal(t, "Adding a config drive is only supported when setting provision state to active, rebuild", r.fault(t))
		e.provision(http.StatusNotAcceptable, id, "1.68", map[string]any{"target": "active",
			"deploy_steps": []any{map[string]any{"interface": "deploy", "step": "s", "args": map[string]any{}, "priority": 1}}})
		require.Equal(t, "available", e.state(id))

		// Maintenance blocks deploying, with Ironic's message.
		e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/maintenance", "1.82", nil)
		r = e.provision(http.StatusBadRequest, id, "1.82", map[string]any{"target": "active"})
		require.Equal(t, "The provisioning operation can't be performed on node "+id+" because it's in maintenance mode.", r.fault(t))
		r = e.provision(http.StatusBadRequest, id, "1.82", map[string]any{"target": "deploy"})
		require.Equal(t, "The provisioning operation can't be performed on node "+id+" because it's in maintenance mode.", r.fault(t))
		// ... but not managing.
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "manage"})
	})

	t.Run("instance traits must be node traits", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := e.availableNode(map[string]any{"instance_info": map[string]any{"traits": []string{"CUSTOM_GPU"}}})
		r := e.provision(http.StatusBadRequest, id, "1.82", map[string]any{"target": "active"})
		require.Equal(t, "Failed to validate deploy or power info for node "+id+": Cannot specify instance traits that are not also set on the node. Node "+id+" is missing traits CUSTOM_GPU", r.fault(t))
		e.must(http.StatusNoContent, http.MethodPut, "/v1/nodes/"+id+"/traits/CUSTOM_GPU", "1.82", nil)
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "active"})
		require.Equal(t, "active", e.state(id))
	})

	t.Run("protected and retired", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := e.activeNode(map[string]any{})
		e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "replace", "path": "/protected", "value": true}})
		r := e.provision(http.StatusForbidden, id, "1.82", map[string]any{"target": "deleted"})
		require.Equal(t, "Node "+id+" is protected and cannot be undeployed, rebuilt or deleted", r.fault(t))
		e.provision(http.StatusForbidden, id, "1.82", map[string]any{"target": "rebuild"})
		e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "replace", "path": "/protected", "value": false},
			{"op": "replace", "path": "/retired", "value": true}})
		// A retired node is not made available again.
		e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "deleted"})
		require.Equal(t, "manageable", e.state(id))
		r = e.provision(http.StatusBadRequest, id, "1.82", map[string]any{"target": "provide"})
		require.Equal(t, "The providing operation can't be performed on node "+id+" because it is retired.", r.fault(t))
	})
}

func TestPowerAndStates(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createNode(map[string]any{"name": "pw"})["uuid"].(string)
	power := func(status int, version string, body map[string]any) response {
		return e.must(status, http.MethodPut, "/v1/nodes/pw/states/power", version, body)
	}
	states := func(version string) map[string]any {
		return e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+id+"/states", version, nil).body
	}
	s := states("1.82")
	require.Nil(t, s["power_state"])
	require.Equal(t, "enroll", s["provision_state"])
	require.Contains(t, s, "boot_mode")
	require.Contains(t, s, "raid_config")
	require.NotContains(t, states("1.74"), "boot_mode")
	require.NotContains(t, states("1.11"), "raid_config")

	r := power(http.StatusAccepted, "1.82", map[string]any{"target": "power on"})
	require.Equal(t, "http://metalloc.test:6385/v1/nodes/pw/states", r.header.Get("Location"))
	require.Equal(t, "power on", states("1.82")["power_state"])
	power(http.StatusAccepted, "1.82", map[string]any{"target": "power off", "timeout": 10})
	require.Equal(t, "power off", states("1.82")["power_state"])
	power(http.StatusAccepted, "1.82", map[string]any{"target": "rebooting"})
	require.Equal(t, "power on", states("1.82")["power_state"])
	power(http.StatusAccepted, "1.82", map[string]any{"target": "soft power off"})
	require.Equal(t, "power off", states("1.82")["power_state"])
	power(http.StatusAccepted, "1.82", map[string]any{"target": "soft rebooting"})
	s = states("1.82")
	require.Equal(t, "power on", s["power_state"])
	require.Nil(t, s["target_power_state"])

	power(http.StatusNotAcceptable, "1.26", map[string]any{"target": "soft power off"})
	power(http.StatusNotAcceptable, "1.26", map[string]any{"target": "power off", "timeout": 5})
	r = power(http.StatusBadRequest, "1.82", map[string]any{"target": "power off", "timeout": 0})
	require.Equal(t, "timeout has to be positive integer", r.fault(t))
	r = power(http.StatusBadRequest, "1.82", map[string]any{"target": "power off", "timeout": "abc"})
	require.Equal(t, "Expected an integer for timeout: abc", r.fault(t))
	r = power(http.StatusBadRequest, "1.82", map[string]any{"target": "off"})
	require.Equal(t, "The requested action \"off\" can not be performed on node \"pw\" while it is in state \"power on\".", r.fault(t))
	r = power(http.StatusBadRequest, "1.82", map[string]any{})
	require.Equal(t, "Missing mandatory parameter: target", r.fault(t))
	require.Equal(t, "power on", states("1.82")["power_state"])
}

func TestMaintenance(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createNode(map[string]any{})["uuid"].(string)
	r := e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/maintenance", "1.82", map[string]any{"reason": "disk"})
	require.Empty(t, r.raw)
	n := e.getNode(id)
	require.Equal(t, true, n["maintenance"])
	require.Equal(t, "disk", n["maintenance_reason"])
	// Without a body: no reason.
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/maintenance", "1.82", nil)
	require.Nil(t, e.getNode(id)["maintenance_reason"])
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/maintenance?reason=q", "1.82", nil)
	require.Equal(t, "q", e.getNode(id)["maintenance_reason"])
	_, err := e.pool.Exec(t.Context(), `UPDATE nodes SET fault = 'power failure' WHERE uuid = $1`, id)
	require.NoError(t, err)
	list := e.must(http.StatusOK, http.MethodGet, "/v1/nodes?fault=power%20failure", "1.82", nil)
	require.Equal(t, []string{id}, uuids(t, list.body))

	e.must(http.StatusAccepted, http.MethodDelete, "/v1/nodes/"+id+"/maintenance", "1.82", nil)
	n = e.getNode(id)
	require.Equal(t, false, n["maintenance"])
	require.Nil(t, n["maintenance_reason"])
	require.Nil(t, n["fault"])

	r = e.must(http.StatusBadRequest, http.MethodPut, "/v1/nodes/"+id+"/maintenance", "1.82", map[string]any{"reason": 5})
	require.Equal(t, "Expected string for reason: 5", r.fault(t))
	r = e.must(http.StatusBadRequest, http.MethodPut, "/v1/nodes/"+id+"/maintenance", "1.82", map[string]any{"why": "x"})
	require.Equal(t, "Unexpected arguments: why", r.fault(t))
	e.must(http.StatusNotFound, http.MethodPut, "/v1/nodes/"+uuid.NewString()+"/maintenance", "1.82", nil)
}

func TestDelete(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, target := range []string{"enroll", "manageable", "available"} {
		id := e.createNode(map[string]any{})["uuid"].(string)
		if target != "enroll" {
			e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "manage"})
		}
		if target == "available" {
			e.provision(http.StatusAccepted, id, "1.82", map[string]any{"target": "provide"})
		}
		r := e.must(http.StatusNoContent, http.MethodDelete, "/v1/nodes/"+id, "1.82", nil)
		require.Empty(t, r.raw)
		e.must(http.StatusNotFound, http.MethodGet, "/v1/nodes/"+id, "1.82", nil)
	}
	// active: refused unless in maintenance.
	id := e.activeNode(map[string]any{"name": "del-active"})
	r := e.must(http.StatusConflict, http.MethodDelete, "/v1/nodes/del-active", "1.82", nil)
	require.Equal(t, "Can not delete node \""+id+"\" while it is in provision state \"active\". Valid provision states to perform deletion are: \"('manageable', 'enroll', 'adopt failed', 'available')\", or set the node into maintenance mode", r.fault(t))
	// with an allocation: associated.
	au := e.allocate(id)
	r = e.must(http.StatusConflict, http.MethodDelete, "/v1/nodes/"+id, "1.82", nil)
	require.Equal(t, "Node "+id+" is associated with instance "+au.String()+".", r.fault(t))
	// in maintenance: deleted, allocation too.
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/maintenance", "1.82", nil)
	e.must(http.StatusNoContent, http.MethodDelete, "/v1/nodes/"+id, "1.82", nil)
	require.False(t, e.allocationExists(au))
	e.must(http.StatusNotFound, http.MethodGet, "/v1/nodes/"+id, "1.82", nil)

	// protected: forbidden even in maintenance.
	id = e.activeNode(map[string]any{})
	e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/"+id, "1.82", []op{{"op": "replace", "path": "/protected", "value": true}})
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/maintenance", "1.82", nil)
	e.must(http.StatusForbidden, http.MethodDelete, "/v1/nodes/"+id, "1.82", nil)

	missing := uuid.NewString()
	r = e.must(http.StatusNotFound, http.MethodDelete, "/v1/nodes/"+missing, "1.82", nil)
	require.Equal(t, "Node "+missing+" could not be found.", r.fault(t))
}
