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

		"/v1/nodes": false, "/v1/nodes/detail": false, "/v1/nodes/n1": false, "/v1/nodes/n1/states/provision": false,
		"/v1/nodes/allocation": false, "/v1/nodes/n1/allocation/x": false, "/v1/ports": false, "/v1/portgroups/p": false,
		"/v1/drivers": false, "/v1/chassis": false, "/v1/deploy_templates": false, "/v1/conductors": false,
		"/v1/volume/connectors": false, "/v1/nodes/n1/history": false, "/v1/nodes/n1/bios": false,
		"/v1/allocationsx": false, "/v1/lookup": false, "/healthcheck": false, "/uix": false,
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
