package ironic

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOwned: the route-level switch keeps metalloc's own routes and sends
// every other one, node reads and writes included, to Ironic.
func TestOwned(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]bool{
		"/": true, "/v1": true, "/v1/": true, "/metrics": true, "/ui": true, "/ui/app.js": true,
		"/v1/allocations": true, "/v1/allocations/": true, "/v1/allocations/abc": true, "/v1/allocations/events": true,
		"/v1/allocation_groups": true, "/v1/allocation_groups/g1": true, "/v1/topology": true, "/v1/ui/fleet": true,
		"/v1/nodes/n1/allocation": true, "/v1/nodes/n1/allocation/": true,
		"/reservation": true, "/reservation/v1/leases": true, "/reservation/v1/os-hosts/1": true,

		"/v1/nodes": false, "/v1/nodes/detail": false, "/v1/nodes/n1": false, "/v1/nodes/n1/states/provision": false,
		"/v1/nodes/allocation": false, "/v1/nodes/n1/allocation/x": false, "/v1/ports": false, "/v1/portgroups/p": false,
		"/v1/drivers": false, "/v1/chassis": false, "/v1/deploy_templates": false, "/v1/conductors": false,
		"/v1/volume/connectors": false, "/v1/nodes/n1/history": false, "/v1/nodes/n1/bios": false,
		"/v1/allocationsx": false, "/v1/lookup": false, "/healthcheck": false, "/uix": false,
		"/reservationx": false, "/v1/reservation": false,
	} {
		require.Equal(t, want, Owned(path), path)
	}
}

// TestNodeOf: the node a proxied change is about.
func TestNodeOf(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]struct {
		ident string
		ok    bool
	}{
		"/v1/nodes": {"", true}, "/v1/nodes/": {"", true}, "/v1/nodes/n1": {"n1", true},
		"/v1/nodes/n1/states/power": {"n1", true}, "/v1/nodes/detail": {"", false}, "/v1/ports": {"", false},
		"/v1/nodes/detail/x": {"detail", true},
	} {
		ident, ok := nodeOf(path)
		require.Equal(t, want.ident, ident, path)
		require.Equal(t, want.ok, ok, path)
	}
}

// TestOwnedSpelling: a request Ironic would resolve to one of metalloc's
// routes is metalloc's, and is canonical only when spelt exactly as
// Ironic resolves it; every other request is Ironic's.
func TestOwnedSpelling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, raw        string
		owned, canonical bool
	}{
		{"/", "", true, true},
		{"/v1", "", true, true},
		{"/v1/allocations", "", true, true},
		{"/v1/allocations/a1", "", true, true},
		{"/v1/nodes/N1/allocation", "", true, true},
		{"/v1/allocations/", "", true, true}, // trailing slashes: RemoveTrailingSlash's
		{"//v1/allocations", "", true, false},
		{"/v1//allocations", "", true, false},
		{"/v1/allocations.json", "", true, false},
		{"/v1/allocations/a1.json", "", true, false},
		{"/v1/./allocations", "", true, false},
		{"/v1/x/../allocations", "", true, false},
		{"/v1/allocations", "/v1%2Fallocations", true, false},
		{"/v1/allocations", "/v1/%61llocations", true, false},
		{"/v1/allocations.json", "/v1/allocations%2ejson", true, false},
		{"/V1/allocations", "", true, false},
		{"/v1/Allocations", "", true, false},
		{"/v1/nodes/n1/allocation.json", "", true, false},
		{"//", "", true, true},
		{"/metrics.json", "", true, false},
		{"/UI/", "", true, false},

		{"/v1/nodes", "", false, true},
		{"/v1/nodes/n1.json", "", false, true},
		{"//v1/nodes", "", false, true},
		{"/v1/nodes/a.b.c", "", false, true},
		{"/v1/lookup", "", false, true},
	} {
		owned, canonical := OwnedSpelling(tc.path, tc.raw)
		require.Equal(t, tc.owned, owned, "%s %s", tc.path, tc.raw)
		require.Equal(t, tc.canonical, canonical, "%s %s", tc.path, tc.raw)
	}
}

// TestIronicPath: paths as Ironic 21.4 resolves them.
func TestIronicPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"": "/", "/": "/", "//": "/", "/v1/": "/v1", "//v1//nodes//": "/v1/nodes", "/v1/nodes.json": "/v1/nodes",
		"/v1/nodes.json/": "/v1/nodes", "/v1/./a/../b": "/v1/b", "/../v1": "/v1", "/v1/n.1": "/v1/n.1",
	} {
		require.Equal(t, want, IronicPath(in), in)
	}
}

// TestPublicRoute: Ironic's agent routes, and nothing that merely starts
// like them.
func TestPublicRoute(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]bool{
		"/v1/lookup": true, "/v1/heartbeat/1be26c0b-03f2-4d2e-ae87-c02d7f33c123": true,
		"/v1/heartbeat/": false, "/v1/heartbeat": false, "/v1/heartbeat/a/b": false, "/v1/heartbeat/..": false,
		"/v1/lookup/x": false, "/v1/nodes": false, "/v1/heartbeat/A": false,
	} {
		require.Equal(t, want, PublicRoute(path), path)
	}
}
