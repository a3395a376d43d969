package node_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDriverRoutes sends every /v1/nodes/{ident}/... route of an interface
// metalloc does not drive, at and below its microversion, and checks the
// answer Ironic 21.4 gives for a hardware type without that interface:
// UnsupportedDriverExtension naming it (404 for RAID), empty reads, and the
// not-found of routes that did not exist yet or do not exist in 21.4.
func TestDriverRoutes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createNode(map[string]any{"name": "dr"})["uuid"].(string)
	const (
		mgmt = "Driver fake-hardware does not support management (disabled or not implemented)."
		gone = "The resource could not be found."
	)
	for _, tc := range []struct {
		method, path, ver, body string
		status                  int
		want                    string // faultstring, or the JSON body of a 200
	}{
		{"PUT", "/states/raid", "1.12", `{"logical_disks":[]}`, 404, "Driver fake-hardware does not support raid (disabled or not implemented)."},
		{"PUT", "/states/raid", "1.82", `{}`, 404, "Driver fake-hardware does not support raid (disabled or not implemented)."},
		{"PUT", "/states/raid", "1.11", `{}`, 406, "Request not acceptable."},
		{"PUT", "/states/raid", "", `{}`, 406, "Request not acceptable."},
		{"GET", "/states/console", "1.1", "", 200, `{"console_enabled":false,"console_info":null}`},
		{"PUT", "/states/console", "1.82", `{"enabled":true}`, 400, "Driver fake-hardware does not support console (disabled or not implemented)."},
		{"PUT", "/states/boot_mode", "1.76", `{"target":"uefi"}`, 400, mgmt},
		{"PUT", "/states/boot_mode", "1.75", `{"target":"uefi"}`, 404, "This endpoint is supported starting with the API version 1.76"},
		{"PUT", "/states/secure_boot", "1.82", `{"target":true}`, 400, mgmt},
		{"PUT", "/states/secure_boot", "1.60", `{"target":true}`, 404, "This endpoint is supported starting with the API version 1.76"},
		{"GET", "/management/boot_device", "1.1", "", 400, mgmt},
		{"PUT", "/management/boot_device", "1.82", `{"boot_device":"pxe"}`, 400, mgmt},
		{"GET", "/management/boot_device/supported", "1.82", "", 400, mgmt},
		{"PUT", "/management/inject_nmi", "1.29", `{}`, 400, mgmt},
		{"PUT", "/management/inject_nmi", "1.28", `{}`, 404, "Resource could not be found."},
		{"GET", "/management/indicators", "1.63", "", 400, mgmt},
		{"GET", "/management/indicators", "1.62", "", 404, gone},
		{"GET", "/management/indicators/led@system", "1.82", "", 400, mgmt},
		{"PUT", "/management/indicators/led@system", "1.82", `{"state":"ON"}`, 400, mgmt},
		{"GET", "/vendor_passthru/methods", "1.1", "", 200, `{}`},
		{"POST", "/vendor_passthru?method=reset", "1.82", `{}`, 400, "No handler for method reset"},
		{"GET", "/vendor_passthru?method=status", "1.82", "", 400, "No handler for method status"},
		{"DELETE", "/vendor_passthru", "1.82", "", 400, "Missing mandatory parameter: method"},
		{"GET", "/bios", "1.40", "", 200, `{"bios":[]}`},
		{"GET", "/bios", "1.39", "", 404, gone},
		{"GET", "/bios/virtualization", "1.82", "", 404, "Node " + id + " doesn't have a BIOS setting 'virtualization'"},
		{"GET", "/history", "1.78", "", 200, `{"history":[]}`},
		{"GET", "/history", "1.77", "", 404, gone},
		{"GET", "/history/abc", "1.82", "", 404, "Node history record abc could not be found."},
		{"GET", "/inventory", "1.81", "", 404, "Node inventory record for node " + id + " could not be found."},
		{"GET", "/inventory", "1.80", "", 404, gone},
		// Firmware is Ironic 23.0 (API 1.86): not a route of 21.4.
		{"GET", "/firmware", "1.82", "", 404, gone},
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

	// The identifier is checked first, the node next, at every route.
	for _, path := range []string{"/states/raid", "/management/boot_device", "/bios", "/vendor_passthru/methods"} {
		method := http.MethodGet
		if strings.HasPrefix(path, "/states/") {
			method = http.MethodPut
		}
		r := e.do(method, "/v1/nodes/bad%20ident"+path, "1.82", "{}")
		require.Equal(t, http.StatusBadRequest, r.status, path)
		require.Equal(t, "Expected UUID or name for node: bad ident", r.fault(t), path)
		r = e.do(method, "/v1/nodes/missing"+path, "1.82", "{}")
		require.Equal(t, http.StatusNotFound, r.status, path)
		require.Equal(t, "Node missing could not be found.", r.fault(t), path)
	}
}
