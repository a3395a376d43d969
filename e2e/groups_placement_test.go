package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/web/webtest"
)

// groupCall sends one request to the API and decodes a JSON answer into
// out (when set); it returns the status.
func groupCall(t *testing.T, ctx context.Context, apiURL, method, path, body string, out any, header ...string) int {
	t.Helper()
	_ = ctx // the test's own context bounds the request
	hdr := []string{"X-OpenStack-Ironic-API-Version", "1.82"}
	if body != "" {
		hdr = append(hdr, "Content-Type", "application/json")
	}
	st, _, raw := webtest.Do(t, method, apiURL+path, body, append(hdr, header...)...)
	if out != nil && st/100 == 2 {
		require.NoError(t, json.Unmarshal(raw, out), "%s", raw)
	}
	return st
}

// TestEndToEndGroupsPlacementBackendHTTP: the stack with
// conductor.allocation_backend placement in mode http (claims through
// metalloc-placement's API, a separate process); see runEndToEndGroups.
func TestEndToEndGroupsPlacementBackendHTTP(t *testing.T) {
	t.Parallel()
	runEndToEndGroups(t, devstack.Options{
		AllocationBackend: "placement",
		Env:               append([]string{"METALLOC_PLACEMENT_BACKEND_MODE=http"}, placementBackendEnv...),
	}, 0)
}

// TestEndToEndGroupsOpenStackPlacement: the same against the reference
// OpenStack Placement 8.0 (Debian's python3-placement, started here): the
// members' one POST /allocations at microversion 1.39 is accepted there
// unchanged. The packages must be installed (.ci/run does it).
func TestEndToEndGroupsOpenStackPlacement(t *testing.T) {
	t.Parallel()
	osp := startOpenStackPlacement(t)
	runEndToEndGroups(t, devstack.Options{
		AllocationBackend: "placement", PlacementBackendEndpoint: osp.URL, Env: placementBackendEnv,
	}, 120*time.Second)
}

// runEndToEndGroups runs the stack with opts (the placement backend) and
// the sample inventory with its row/rack topology. A group of 5 gold nodes
// required in one rack lands in one of the two racks that have 5, with one
// Placement allocation per member on its node (the member's uuid as
// consumer); a group of 6 fits no rack and fails with nothing claimed;
// deleting the first group empties Placement (the resource tracker
// removes the released members' allocations).
func runEndToEndGroups(t *testing.T, opts devstack.Options, mirrorTimeout time.Duration) {
	ctx := context.Background()
	stack, client := startStackOpts(t, 2, opts)
	sample := loadSample(t)
	enroll(t, ctx, client, sample)
	waitMirrored(t, ctx, stack.BackendPlacementURL, sample, mirrorTimeout)
	require.Equal(t, http.StatusOK, groupCall(t, ctx, stack.APIURL, http.MethodPut, "/v1/topology",
		`{"levels":[{"name":"row","source":"extra.row"},{"name":"rack","source":"extra.rack"}]}`, nil))

	type group struct {
		UUID      string   `json:"uuid"`
		State     string   `json:"state"`
		LastError *string  `json:"last_error"`
		Members   []string `json:"members"`
	}
	var g group
	require.Equal(t, http.StatusCreated, groupCall(t, ctx, stack.APIURL, http.MethodPost, "/v1/allocation_groups",
		`{"count":5,"resource_class":"baremetal-gold","required":"rack"}`, &g, "Prefer", "wait=30"))
	require.Equal(t, "active", g.State, "last_error: %v", g.LastError)

	held := placementAllocations(t, ctx, stack.BackendPlacementURL, sample)
	require.Len(t, held, 5, "one Placement allocation per member")
	byUUID := map[string]sampleNode{}
	for _, s := range sample {
		byUUID[s.UUID] = s
	}
	require.Len(t, g.Members, 5)
	racks := map[string]bool{}
	for node, consumer := range held {
		require.Contains(t, g.Members, consumer, "the Placement consumer is a member")
		s := byUUID[node]
		require.Equal(t, "baremetal-gold", s.ResourceClass)
		racks[strings.TrimSpace(jsonText(s.Extra["row"])+"/"+jsonText(s.Extra["rack"]))] = true
	}
	require.Len(t, racks, 1, "members in one rack: %v", racks)

	var big group
	require.Equal(t, http.StatusCreated, groupCall(t, ctx, stack.APIURL, http.MethodPost, "/v1/allocation_groups",
		`{"count":6,"resource_class":"baremetal-gold","required":"rack"}`, &big, "Prefer", "wait=30"))
	require.Equal(t, "error", big.State)
	require.NotNil(t, big.LastError)
	require.Contains(t, *big.LastError, "no rack has 6 free nodes of baremetal-gold")
	require.Len(t, placementAllocations(t, ctx, stack.BackendPlacementURL, sample), 5, "nothing claimed for the failed group")

	require.Equal(t, http.StatusNoContent, groupCall(t, ctx, stack.APIURL, http.MethodDelete, "/v1/allocation_groups/"+g.UUID, "", nil))
	waitPlacementEmpty(t, ctx, stack.BackendPlacementURL, sample)
}

// jsonText is v (a YAML scalar) as text.
func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return strings.Trim(string(b), `"`)
}
