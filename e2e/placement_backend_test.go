package e2e

import (
	"context"
	"fmt"
	neturl "net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/placement/client"
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

// The placement backend from the first second (issue 29), with the
// periodic sync off so that nothing but the prompt path can do it: a node
// made available through the API is mirrored by the resource tracker's
// pass over the node change log and is then allocatable through the
// placement backend; a deleted allocation's Placement allocation is gone
// by the time its DELETE returns (the deallocation releases it in its
// transaction), and the node can be allocated again at once. In mode auto
// (in-process) and mode http against the same metalloc-placement.
func TestPlacementBackendFirstSecond(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"auto", "http"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			stack, bm := startStackOpts(t, 1, devstack.Options{AllocationBackend: "placement",
				Env: []string{"METALLOC_PLACEMENT_BACKEND_SYNC_SCHEDULE=off", "METALLOC_PLACEMENT_BACKEND_MODE=" + mode}})
			sample := loadSample(t)[:1]
			enroll(t, ctx, bm, sample)
			node := sample[0]
			pc := metallocPlacementClient(stack.BackendPlacementURL)
			rc := client.NormalizeClass(node.ResourceClass)
			free := func() bool {
				ps, err := pc.ListProviders(ctx, neturl.Values{"resources": {rc + ":1"}})
				return err == nil && len(ps) == 1
			}
			dbtest.WaitFor(t, 60*time.Second, "the node made available to be offered by Placement", free)

			for round := range 2 {
				var a struct {
					UUID     string  `json:"uuid"`
					State    string  `json:"state"`
					NodeUUID *string `json:"node_uuid"`
				}
				require.Equal(t, 201, groupCall(t, ctx, stack.APIURL, "POST", "/v1/allocations",
					fmt.Sprintf(`{"resource_class": %q}`, node.ResourceClass), &a, "Prefer", "wait=60"))
				require.Equal(t, "active", a.State, "round %d", round)
				require.Equal(t, node.UUID, *a.NodeUUID)
				held, err := pc.GetAllocations(ctx, uuid.MustParse(a.UUID))
				require.NoError(t, err)
				require.Len(t, held.Allocations, 1, "claimed in Placement")
				require.False(t, free(), "the node's capacity is used")

				require.Equal(t, 204, groupCall(t, ctx, stack.APIURL, "DELETE", "/v1/allocations/"+a.UUID, "", nil))
				held, err = pc.GetAllocations(ctx, uuid.MustParse(a.UUID))
				require.NoError(t, err)
				require.Empty(t, held.Allocations, "released when the DELETE returned")
				require.True(t, free(), "the node's capacity is free when the DELETE returned")
			}
		})
	}
}
