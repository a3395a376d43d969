package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/devstack"
)

// placementBackendEnv makes the resource tracker quick enough for a test:
// a periodic reconcile every 2s on top of the prompt, debounced syncs.
var placementBackendEnv = []string{"METALLOC_PLACEMENT_BACKEND_SYNC_SCHEDULE=@every 2s"}

// The end-to-end allocation test with conductor.allocation_backend:
// placement against the stack's own metalloc-placement (randomized
// allocation candidates, so the two conductors spread), in mode auto,
// which finds metalloc-placement on the same database and claims
// in-process: two conductors racing, no node booked twice, Placement's
// usages exactly the reserved nodes, nothing left after the deletes.
func TestEndToEndAllocationsPlacementBackend(t *testing.T) {
	t.Parallel()
	runEndToEndAllocations(t, backendRun{opts: devstack.Options{
		AllocationBackend: "placement", Env: placementBackendEnv,
	}})
}

// The same with placement_backend.mode http: the claims go through
// metalloc-placement's API.
func TestEndToEndAllocationsPlacementBackendHTTP(t *testing.T) {
	t.Parallel()
	runEndToEndAllocations(t, backendRun{opts: devstack.Options{
		AllocationBackend: "placement",
		Env:               append([]string{"METALLOC_PLACEMENT_BACKEND_MODE=http"}, placementBackendEnv...),
	}})
}

// startOpenStackPlacement starts the reference OpenStack Placement 8.0
// for the test (stopped at its end; its log's tail shown on failure). The
// packages must be installed: without them the test fails, never skips.
func startOpenStackPlacement(t *testing.T) *devstack.OpenStackPlacement {
	t.Helper()
	osp, err := devstack.StartOpenStackPlacement(context.Background(), t.TempDir(), zaptest.NewLogger(t))
	require.NoError(t, err, "this test needs OpenStack Placement 8.0: apt-get install -y %s", devstack.OpenStackPlacementPackages)
	t.Cleanup(func() {
		osp.Stop()
		if t.Failed() {
			logTail(t, osp.LogPath, 60)
		}
	})
	return osp
}

// The same against the reference OpenStack Placement 8.0 (Debian's
// python3-placement on sqlite, started here), unchanged conductor code. It
// runs a subset of the requests: the reference answers one request at a
// time. The packages must be installed (.ci/run does it); without them the
// test fails, it never skips.
func TestEndToEndAllocationsOpenStackPlacement(t *testing.T) {
	t.Parallel()
	osp := startOpenStackPlacement(t)
	runEndToEndAllocations(t, backendRun{
		opts: devstack.Options{
			AllocationBackend: "placement", PlacementBackendEndpoint: osp.URL, Env: placementBackendEnv,
		},
		requests:      40,
		mirrorTimeout: 120 * time.Second,
	})
}
