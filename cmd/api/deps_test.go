package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAPIDoesNotLinkTheEngine: metalloc-api serves the API only. The
// conductor engine (package conductor and its reservation backends) and
// what only they need (the Placement service, its candidate search, the
// scheduler) must not be among its dependencies: their package
// initialisation would run in every API process (placement compiles its
// JSON schemas at start-up), and an import would tie the API's packages to
// the engine again. conductor/conductorapi (GET /v1/conductors) and
// placement/client (the Keystone access checks) are allowed.
func TestAPIDoesNotLinkTheEngine(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	const mod = "github.com/metalloc/metalloc/"
	forbidden := []string{"placement", "placement/candidate", "scheduler", "conductor", "conductor/backend"}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(p, mod); ok {
			deps[rest] = true
		}
	}
	require.True(t, deps["allocation"], "go list -deps lists the API's own packages")
	for _, p := range forbidden {
		require.False(t, deps[p], "metalloc-api depends on %s", p)
	}
	for p := range deps {
		require.False(t, strings.HasPrefix(p, "conductor/backend/"), "metalloc-api depends on %s", p)
	}
}
