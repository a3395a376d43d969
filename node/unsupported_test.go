package node_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDriverRoutes sends every /v1/nodes/{ident}/... route of a hardware
// interface, at and below its microversion, to an ipmi node (whose no-raid,
// no-console, no-bios interfaces and BMC-bound ipmitool management lack the
// features) and checks the answer Ironic 21.4 gives for a hardware type
// without the interface: UnsupportedDriverExtension naming it (404 for
// RAID), empty reads, and the not-found of routes that did not exist yet or
// do not exist in 21.4. The fake interfaces' answers are TestFakeInterfaces'.
func TestDriverRoutes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createNode(map[string]any{"name": "dr", "driver": "ipmi"})["uuid"].(string)
	var dbID int64
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT id FROM nodes WHERE uuid = $1`, id).Scan(&dbID))
	const (
		gone    = "The resource could not be found."
		boolErr = "acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'"
	)
	lacks := func(what string) string {
		return "Driver ipmi does not support " + what + " (disabled or not implemented)."
	}
	for _, tc := range []struct {
		method, path, ver, body string
		status                  int
		want                    string // faultstring, or the JSON body of a 200
	}{
		{"PUT", "/states/raid", "1.12", `{"logical_disks":[{"size_gb":10,"raid_level":"1"}]}`, 404, lacks("raid")},
		{"PUT", "/states/raid", "1.82", `[]`, 400, "Expected types <class 'dict'> for target_raid_config: []"},
		{"PUT", "/states/raid", "1.82", `null`, 400, "Expected types <class 'dict'> for target_raid_config: None"},
		{"PUT", "/states/raid", "1.11", `{}`, 406, "Request not acceptable."},
		{"PUT", "/states/raid", "", `{}`, 406, "Request not acceptable."},
		{"GET", "/states/console", "1.1", "", 200, `{"console_enabled":false,"console_info":null}`},
		{"GET", "/states/console?x=1", "1.82", "", 400, "Unexpected arguments: x"},
		{"PUT", "/states/console", "1.82", `{"enabled":true}`, 400, lacks("console")},
		{"PUT", "/states/console", "1.82", `{}`, 400, "Missing mandatory parameter: enabled"},
		{"PUT", "/states/console", "1.82", `{"enabled":"maybe"}`, 400, "Invalid enabled: Unrecognized value 'maybe', " + boolErr},
		{"PUT", "/states/boot_mode", "1.76", `{"target":"uefi"}`, 400, lacks("set_boot_mode")},
		{"PUT", "/states/boot_mode", "1.82", `{"target":"foo"}`, 400, "Invalid boot mode foo requested for node. Allowed boot modes are: bios, uefi"},
		{"PUT", "/states/boot_mode", "1.82", `{}`, 400, "Missing mandatory parameter: target"},
		{"PUT", "/states/boot_mode", "1.75", `{"target":"uefi"}`, 404, "This endpoint is supported starting with the API version 1.76"},
		{"PUT", "/states/secure_boot", "1.82", `{"target":true}`, 400, lacks("set_secure_boot_state")},
		{"PUT", "/states/secure_boot", "1.82", `{"target":"x"}`, 400, "Invalid target: Unrecognized value 'x', " + boolErr},
		{"PUT", "/states/secure_boot", "1.60", `{"target":true}`, 404, "This endpoint is supported starting with the API version 1.76"},
		{"GET", "/management/boot_device", "1.1", "", 400, lacks("management")},
		{"GET", "/management/boot_device?x=1", "1.82", "", 400, "Unexpected arguments: x"},
		{"PUT", "/management/boot_device", "1.82", `{"boot_device":"pxe"}`, 400, lacks("management")},
		{"PUT", "/management/boot_device", "1.82", `{}`, 400, "Missing mandatory parameter: boot_device"},
		{"PUT", "/management/boot_device", "1.82", `{"boot_device":"pxe","x":1}`, 400, "Unexpected arguments: x"},
		{"GET", "/management/boot_device/supported", "1.82", "", 400, lacks("management")},
		{"PUT", "/management/inject_nmi", "1.29", `{}`, 400, lacks("inject_nmi")},
		{"PUT", "/management/inject_nmi", "1.28", `{}`, 404, "Resource could not be found."},
		{"GET", "/management/indicators", "1.62", "", 400, lacks("get_supported_indicators")},
		{"GET", "/management/indicators?x=1", "1.82", "", 400, lacks("get_supported_indicators")},
		{"PUT", "/management/inject_nmi", "1.82", `{"x":1}`, 400, "Unexpected arguments: x"},
		{"PUT", "/states/raid?x=1", "1.82", `{}`, 400, "Unexpected arguments: x"},
		{"GET", "/bios?x=1", "1.82", "", 400, "Unexpected arguments: x"},
		{"GET", "/vendor_passthru?method=a&x=1", "1.82", "", 400, "Unexpected arguments: x"},
		{"GET", "/management/indicators/led@system", "1.82", "", 400, lacks("get_indicator_state")},
		{"PUT", "/management/indicators/led@system", "1.82", `{"state":"ON"}`, 400, lacks("set_indicator_state")},
		{"PUT", "/management/indicators/led@system", "1.82", `{}`, 400, "Missing mandatory parameter: state"},
		{"GET", "/vendor_passthru/methods", "1.1", "", 200, `{}`},
		{"POST", "/vendor_passthru?method=reset", "1.82", `{}`, 400, "No handler for method reset"},
		{"GET", "/vendor_passthru?method=status", "1.82", "", 400, "No handler for method status"},
		{"DELETE", "/vendor_passthru", "1.82", "", 400, "Missing mandatory parameter: method"},
		{"POST", "/vendor_passthru/reset", "1.82", `{"a":1}`, 400, "No handler for method reset"},
		{"GET", "/vendor_passthru/status", "1.82", "", 400, "No handler for method status"},
		{"GET", "/vifs", "1.28", "", 200, `{"vifs":[]}`},
		{"GET", "/vifs", "1.27", "", 404, gone},
		{"GET", "/bios", "1.40", "", 200, `{"bios":[]}`},
		{"GET", "/bios", "1.39", "", 404, gone},
		{"GET", "/bios/virtualization", "1.82", "", 404, "Node " + id + " doesn't have a BIOS setting 'virtualization'"},
		{"GET", "/bios/virtualization", "1.39", "", 404, gone},
		{"GET", "/history", "1.78", "", 200, `{"history":[]}`},
		{"GET", "/history", "1.77", "", 404, gone},
		{"GET", "/history/abc", "1.82", "", 404, "Node history record abc could not be found."},
		{"GET", "/inventory", "1.81", "", 404, fmt.Sprintf("Node inventory record for node %d could not be found.", dbID)},
		{"GET", "/inventory", "1.80", "", 404, gone},
		// Firmware is Ironic 23.0 (API 1.86). In 21.4 GET hands the segment
		// to the node's show as its fields argument.
		{"GET", "/firmware", "1.82", "", 400, "Field firmware is not a valid field."},
		{"GET", "/firmware", "1.7", "", 406, "Request not acceptable."},
		{"GET", "/name", "1.82", "", 200, `{"name":"dr","links":[{"href":"http://metalloc.test:6385/v1/nodes/` + id +
			`","rel":"self"},{"href":"http://metalloc.test:6385/nodes/` + id + `","rel":"bookmark"}]}`},
		{"PUT", "/states/firmware", "1.82", `{}`, 404, gone},
	} {
		name := tc.method + " " + tc.path + " @" + tc.ver
		var body any
		if tc.body != "" {
			body = tc.body
		}
		r := e.do(tc.method, "/v1/nodes/"+id+tc.path, tc.ver, body)
		require.Equal(t, tc.status, r.status, "%s: %s", name, r.raw)
		if tc.status == http.StatusOK {
			require.JSONEq(t, tc.want, string(r.raw), name)
			continue
		}
		require.Equal(t, tc.want, r.fault(t), name)
	}

	// An empty RAID configuration needs no RAID interface: it is stored.
	_, err := e.pool.Exec(t.Context(), `UPDATE nodes SET target_raid_config = '{"logical_disks":[]}' WHERE uuid = $1`, id)
	require.NoError(t, err)
	e.must(http.StatusNoContent, http.MethodPut, "/v1/nodes/"+id+"/states/raid", "1.82", `{}`)
	require.Equal(t, map[string]any{}, e.getNode(id)["target_raid_config"])
	e.must(http.StatusNoContent, http.MethodPut, "/v1/nodes/"+id+"/states/raid", "1.82", "")

	// The identifier is checked first (named as Ironic's routing names it),
	// the arguments next, then the node, then a version checked late.
	for _, tc := range []struct {
		method, path, ver, body string
		status                  int
		want                    string
	}{
		{"PUT", "/bad%20ident/states/raid", "1.82", `{}`, 400, "Expected UUID or name for node_ident: bad ident"},
		{"GET", "/bad%20ident/management/boot_device", "1.82", "", 400, "Expected UUID or name for node_ident: bad ident"},
		{"GET", "/bad%20ident/vendor_passthru/methods", "1.82", "", 400, "Expected UUID or name for node_ident: bad ident"},
		{"GET", "/bad%20ident/states", "1.1", "", 400, "Expected UUID or name for node_ident: bad ident"},
		{"PUT", "/bad%20ident/maintenance", "1.82", `{}`, 400, "Expected UUID or name for node_ident: bad ident"},
		{"GET", "/bad%20ident/bios", "1.82", "", 400, "Expected UUID or name for node: bad ident"},
		{"GET", "/bad%20ident/traits", "1.82", "", 400, "Expected UUID or name for node: bad ident"},
		{"GET", "/bad%20ident/firmware", "1.82", "", 400, "Expected UUID or name for node: bad ident"},
		{"PUT", "/missing/states/raid", "1.82", `[]`, 400, "Expected types <class 'dict'> for target_raid_config: []"},
		{"PUT", "/missing/states/console", "1.82", `{}`, 400, "Missing mandatory parameter: enabled"},
		{"PUT", "/missing/states/boot_mode", "1.75", `{"target":"uefi"}`, 404, "Node missing could not be found."},
		{"PUT", "/missing/management/inject_nmi", "1.28", `{}`, 404, "Resource could not be found."},
		{"GET", "/missing/bios", "1.82", "", 404, "Node missing could not be found."},
		{"GET", "/missing/firmware", "1.82", "", 404, "Node missing could not be found."},
		// Under /states, /management and /vendor_passthru the identifier is
		// an argument: unexpected arguments come before it.
		{"PUT", "/bad%20ident/states/console", "1.82", `{"x":1}`, 400, "Unexpected arguments: x"},
		{"PUT", "/bad%20ident/states/console", "1.82", `{}`, 400, "Expected UUID or name for node_ident: bad ident"},
		{"PUT", "/bad%20ident/management/inject_nmi", "1.28", `{}`, 400, "Expected UUID or name for node_ident: bad ident"},
		{"GET", "/bad%20ident/bios?x=1", "1.82", "", 400, "Expected UUID or name for node: bad ident"},
		// Names are a lookup rule (from 1.5): arguments and gates come first.
		{"PUT", "/missing/states/console", "1.1", `{}`, 400, "Missing mandatory parameter: enabled"},
		{"GET", "/missing/bios", "1.1", "", 404, gone},
		{"GET", "/bad%20ident/traits", "1.1", "", 400, "Expected UUID or name for node: bad ident"},
		{"GET", "/missing/states/console", "1.1", "", 404, "Node missing could not be found."},
	} {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		r := e.do(tc.method, "/v1/nodes"+tc.path, tc.ver, body)
		require.Equal(t, tc.status, r.status, "%s %s: %s", tc.method, tc.path, r.raw)
		require.Equal(t, tc.want, r.fault(t), tc.path)
	}
}
