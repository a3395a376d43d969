package node_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestCreate(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("ok", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := uuid.NewString()
		r := e.must(http.StatusCreated, http.MethodPost, "/v1/nodes", "1.82", map[string]any{
			"uuid": id, "name": "n-ok", "driver": "fake-hardware", "resource_class": "baremetal-gold",
			"properties": map[string]any{"cpus": 8}, "extra": map[string]any{"rack": "r1"},
			"driver_info": map[string]any{"ipmi_address": "10.0.0.1", "ipmi_password": "secret"},
			"owner":       "proj", "description": "desc", "conductor_group": "GroupA",
			"deploy_interface": "fake", "automated_clean": "false", "lessee": "les", "shard": "s1",
		})
		require.Equal(t, "http://metalloc.test:6385/v1/nodes/"+id, r.header.Get("Location"))
		b := r.body
		require.Equal(t, id, b["uuid"])
		require.Equal(t, "n-ok", b["name"])
		require.Equal(t, "enroll", b["provision_state"])
		require.Nil(t, b["power_state"])
		require.Equal(t, "baremetal-gold", b["resource_class"])
		require.Equal(t, "groupa", b["conductor_group"])
		require.Equal(t, false, b["automated_clean"])
		require.Equal(t, "fake", b["deploy_interface"])
		require.Equal(t, "noop", b["network_interface"])
		require.Equal(t, "noop", b["storage_interface"])
		require.Equal(t, map[string]any{"cpus": float64(8)}, b["properties"])
		require.Equal(t, map[string]any{"ipmi_address": "10.0.0.1", "ipmi_password": "******"}, b["driver_info"])
		require.Equal(t, []any{}, b["traits"])
		require.Nil(t, b["allocation_uuid"])
		require.Nil(t, b["chassis_uuid"])
		require.Equal(t, map[string]any{}, b["clean_step"])
		require.Contains(t, b, "boot_mode")
		require.Contains(t, b, "shard")
		require.Contains(t, b, "states")
		require.Contains(t, b, "volume")
		links := b["links"].([]any)
		require.Equal(t, map[string]any{"href": "http://metalloc.test:6385/v1/nodes/" + id, "rel": "self"}, links[0])
		require.Equal(t, map[string]any{"href": "http://metalloc.test:6385/nodes/" + id, "rel": "bookmark"}, links[1])
		created := b["created_at"].(string)
		require.True(t, strings.HasSuffix(created, "+00:00"), created)
		require.Nil(t, b["updated_at"])
	})

	t.Run("generated uuid and defaults", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		b := e.createNode(map[string]any{})
		_, err := uuid.Parse(b["uuid"].(string))
		require.NoError(t, err)
		require.Nil(t, b["name"])
		require.Nil(t, b["resource_class"])
		require.Equal(t, "", b["conductor_group"])
		require.Equal(t, false, b["maintenance"])
	})

	t.Run("old microversion starts available and hides new fields", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		r := e.must(http.StatusCreated, http.MethodPost, "/v1/nodes", "", map[string]any{"driver": "fake-hardware"})
		// Below 1.2 "available" was shown as no state (null).
		require.Nil(t, r.body["provision_state"])
		require.Equal(t, "1.1", r.header.Get("X-OpenStack-Ironic-API-Version"))
		for _, f := range []string{"name", "resource_class", "traits", "owner", "driver_internal_info", "states", "conductor_group"} {
			require.NotContains(t, r.body, f)
		}
		r = e.must(http.StatusCreated, http.MethodPost, "/v1/nodes", "1.10", map[string]any{"driver": "fake-hardware"})
		require.Equal(t, "available", r.body["provision_state"])
		require.Contains(t, r.body, "name")
		require.NotContains(t, r.body, "resource_class")
		r = e.must(http.StatusCreated, http.MethodPost, "/v1/nodes", "1.11", map[string]any{"driver": "fake-hardware"})
		require.Equal(t, "enroll", r.body["provision_state"])
	})

	t.Run("duplicates", func(t *testing.T) {
		t.Parallel()
		e := e.sub(t)
		id := uuid.NewString()
		e.createNode(map[string]any{"uuid": id, "name": "dup-name"})
		r := e.must(http.StatusConflict, http.MethodPost, "/v1/nodes", "1.82", map[string]any{"uuid": id, "driver": "fake-hardware"})
		require.Equal(t, "A node with UUID "+id+" already exists.", r.fault(t))
		r = e.must(http.StatusConflict, http.MethodPost, "/v1/nodes", "1.82", map[string]any{"name": "dup-name", "driver": "fake-hardware"})
		require.Equal(t, "A node with name dup-name already exists.", r.fault(t))
		inst := uuid.NewString()
		e.createNode(map[string]any{"instance_uuid": inst})
		r = e.must(http.StatusConflict, http.MethodPost, "/v1/nodes", "1.82", map[string]any{"instance_uuid": inst, "driver": "fake-hardware"})
		require.Contains(t, r.fault(t), "Instance "+inst+" is already associated with a node")
	})

	bad := []struct {
		name    string
		version string
		body    any
		status  int
		msg     string
	}{
		{"missing driver", "1.82", map[string]any{"name": "x"}, 400, "Schema error for node: 'driver' is a required property"},
		{"unknown field", "1.82", map[string]any{"driver": "fake-hardware", "foo": 1}, 400,
			"Schema error for node: Additional properties are not allowed ('foo' was unexpected)"},
		{"protected is patch-only", "1.82", map[string]any{"driver": "fake-hardware", "protected": true}, 400,
			"Schema error for node: Additional properties are not allowed ('protected' was unexpected)"},
		{"long resource class", "1.82", map[string]any{"driver": "fake-hardware", "resource_class": strings.Repeat("a", 81)}, 400,
			"Schema error for node: '" + strings.Repeat("a", 81) + "' is too long"},
		{"wrong type", "1.82", map[string]any{"driver": "fake-hardware", "extra": "x"}, 400,
			"Schema error for node: 'x' is not of type 'object', 'null'"},
		{"not an object", "1.82", []any{1}, 400, "Schema error for node: [1] is not of type 'object'"},
		{"invalid json", "1.82", "{", 400, ""},
		{"bad uuid", "1.82", map[string]any{"driver": "fake-hardware", "uuid": "nope"}, 400, "Expected UUID for uuid: nope"},
		{"bad bool", "1.82", map[string]any{"driver": "fake-hardware", "maintenance": "maybe"}, 400,
			"Invalid maintenance: Unrecognized value 'maybe', acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'"},
		{"invalid name", "1.82", map[string]any{"driver": "fake-hardware", "name": "a b"}, 400, "Cannot create node with invalid name 'a b'"},
		{"uuid as name", "1.82", map[string]any{"driver": "fake-hardware", "name": uuid.NewString()}, 400, "Cannot create node with invalid name"},
		{"reserved name", "1.82", map[string]any{"driver": "fake-hardware", "name": "detail"}, 400,
			"The word \"detail\" is reserved and can not be used as a node name. Reserved words are: maintenance, management, states, vendor_passthru, detail, validate."},
		{"hostname rules before 1.10", "1.9", map[string]any{"driver": "fake-hardware", "name": "under_score"}, 400,
			"Cannot create node with invalid name 'under_score'"},
		{"name before 1.5", "1.4", map[string]any{"driver": "fake-hardware", "name": "n"}, 406, "Request not acceptable."},
		{"owner before 1.50", "1.49", map[string]any{"driver": "fake-hardware", "owner": "p"}, 406, "Request not acceptable."},
		{"conductor group chars", "1.82", map[string]any{"driver": "fake-hardware", "conductor_group": "a b"}, 400,
			"Expected a conductor group but received a b."},
		{"chassis", "1.82", map[string]any{"driver": "fake-hardware", "chassis_uuid": uuid.NewString()}, 400, "could not be found."},
		{"bad interface", "1.82", map[string]any{"driver": "fake-hardware", "deploy_interface": "iscsi"}, 400,
			"Could not find the following interface in the 'ironic.hardware.interfaces.deploy' entrypoint: iscsi. Valid interfaces are ['fake', 'direct']."},
		{"query argument", "1.82", map[string]any{"driver": "fake-hardware"}, 400, "Unexpected arguments: x"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := e.sub(t)
			path := "/v1/nodes"
			if tc.name == "query argument" {
				path += "?x=1"
			}
			r := e.must(tc.status, http.MethodPost, path, tc.version, tc.body)
			if tc.msg != "" {
				require.Contains(t, r.fault(t), tc.msg)
			}
		})
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	e := setup(t)
	b := e.createNode(map[string]any{"name": "node-get.1", "owner": "o"})
	id := b["uuid"].(string)

	require.Equal(t, id, e.getNode(id)["uuid"])
	require.Equal(t, id, e.getNode("node-get.1")["uuid"])
	// Upper-case uuids are uuids too.
	require.Equal(t, id, e.getNode(strings.ToUpper(id))["uuid"])

	missing := uuid.NewString()
	r := e.must(http.StatusNotFound, http.MethodGet, "/v1/nodes/"+missing, "1.82", nil)
	require.Equal(t, "Node "+missing+" could not be found.", r.fault(t))
	require.Contains(t, r.body["error_message"], `"faultcode":"Client"`)
	r = e.must(http.StatusNotFound, http.MethodGet, "/v1/nodes/nope", "1.82", nil)
	require.Equal(t, "Node nope could not be found.", r.fault(t))
	// Names need 1.5.
	r = e.must(http.StatusNotFound, http.MethodGet, "/v1/nodes/node-get.1", "1.4", nil)
	require.Equal(t, "Node node-get.1 could not be found.", r.fault(t))
	r = e.must(http.StatusBadRequest, http.MethodGet, "/v1/nodes/a%20b", "1.82", nil)
	require.Equal(t, "Expected UUID or name for node: a b", r.fault(t))

	// fields
	r = e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+id+"?fields=uuid,owner,traits", "1.82", nil)
	require.Len(t, r.body, 4)
	require.Equal(t, "o", r.body["owner"])
	require.Contains(t, r.body, "links")
	r = e.must(http.StatusBadRequest, http.MethodGet, "/v1/nodes/"+id+"?fields=uuid,bogus", "1.82", nil)
	require.Equal(t, "Field bogus is not a valid field.", r.fault(t))
	e.must(http.StatusNotAcceptable, http.MethodGet, "/v1/nodes/"+id+"?fields=uuid", "1.7", nil)
	e.must(http.StatusNotAcceptable, http.MethodGet, "/v1/nodes/"+id+"?fields=owner", "1.49", nil)

	// Fields appear with the microversion that introduced them.
	gates := map[string]string{
		"owner": "1.50", "description": "1.51", "allocation_uuid": "1.52", "lessee": "1.65",
		"retired": "1.61", "shard": "1.82", "traits": "1.37", "resource_class": "1.21",
		"conductor_group": "1.46", "conductor": "1.49", "protected": "1.48", "network_data": "1.66",
		"boot_mode": "1.75", "secure_boot": "1.75", "fault": "1.42", "automated_clean": "1.47",
		"bios_interface": "1.40", "rescue_interface": "1.38", "storage_interface": "1.33",
		"boot_interface": "1.31", "network_interface": "1.20", "raid_config": "1.12", "name": "1.5",
		"driver_internal_info": "1.3", "clean_step": "1.7", "deploy_step": "1.44",
	}
	for field, ver := range gates {
		minor := ver[2:]
		m, err := strconv.Atoi(minor)
		require.NoError(t, err)
		prev := "1." + strconv.Itoa(m-1)
		require.Contains(t, e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+id, ver, nil).body, field, "at %s", ver)
		require.NotContains(t, e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+id, prev, nil).body, field, "at %s", prev)
	}
}
