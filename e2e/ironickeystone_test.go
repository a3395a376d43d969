package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/internal/keystonetest"
)

// TestIronicFrontKeystone: metalloc-api and a conductor in front of the
// real Ironic, both in keystone mode on one Keystone. A project member's
// token reaches Ironic through metalloc: the node list is what Ironic
// shows that project (its owner scoping); the member's allocation gets the
// project as owner, lands on the project's node, and Ironic's copy is the
// project's (the member reads it from Ironic directly, with the same
// token); the member deletes it through metalloc (Ironic checks the token
// first). No token: Ironic's 401 for proxied routes, metalloc's for its
// own.
func TestIronicFrontKeystone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ks, err := keystonetest.StartKeystone(ctx, t.TempDir(), zaptest.NewLogger(t))
	require.NoError(t, err, "this test needs Keystone: apt-get install -y %s", keystonetest.KeystonePackages)
	t.Cleanup(ks.Stop)
	ir := startIronic(t, devstack.IronicOptions{AuthStrategy: devstack.IronicKeystone, Keystone: ks, Conductors: 1})

	tenant, err := ks.CreateProject(ctx, "tenant")
	require.NoError(t, err)
	svc, err := ks.CreateProject(ctx, "service")
	require.NoError(t, err)
	alice, err := ks.CreateUser(ctx, "alice", "alice-pw")
	require.NoError(t, err)
	require.NoError(t, ks.GrantProjectRole(ctx, alice, tenant, "member"))
	// metalloc's service user: validates tokens (service role) and, system
	// scoped, reads every node and makes allocations for any project in
	// Ironic (system admin).
	metalloc, err := ks.CreateUser(ctx, "metalloc", "metalloc-pw")
	require.NoError(t, err)
	require.NoError(t, ks.GrantProjectRole(ctx, metalloc, svc, "service"))
	require.NoError(t, ks.GrantProjectRole(ctx, metalloc, svc, "admin"))
	require.NoError(t, ks.GrantSystemRole(ctx, metalloc, "admin"))
	nodes, err := ir.EnrollAvailable(ctx, []devstack.IronicNode{
		{Name: "ks-mine", ResourceClass: "ks", Owner: tenant}, {Name: "ks-other", ResourceClass: "ks"}}, 2)
	require.NoError(t, err)

	stack, pool := ironicStack(t, ir, 1,
		"METALLOC_API_AUTH_STRATEGY=keystone",
		"METALLOC_KEYSTONE_AUTH_URL="+ks.URL,
		"METALLOC_KEYSTONE_USERNAME=metalloc",
		"METALLOC_KEYSTONE_PASSWORD=metalloc-pw",
		"METALLOC_IRONIC_AUTH_STRATEGY=keystone")
	waitFree(t, pool, "ks", 2)
	api := stack.APIURL
	tok, err := ks.Token(ctx, "alice", "alice-pw", keystonetest.Scope{Project: "tenant"})
	require.NoError(t, err)

	st, raw := apiCall(t, http.MethodGet, api+"/v1/nodes", nil, "X-Auth-Token", tok)
	require.Equal(t, http.StatusOK, st, "%s", raw)
	var list struct {
		Nodes []struct {
			Name string `json:"name"`
		} `json:"nodes"`
	}
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list.Nodes, 1, "%s", raw)
	require.Equal(t, "ks-mine", list.Nodes[0].Name, "Ironic's project scoping, with alice's token")

	a, err := allocate(t, api, map[string]any{"resource_class": "ks"}, "X-Auth-Token", tok)
	require.NoError(t, err)
	require.Equal(t, "active", a.State, "%v", a.LastError)
	require.Equal(t, nodes[0], *a.NodeUUID, "the project's own node")
	st, raw = apiCall(t, http.MethodGet, ir.URL+"/v1/allocations/"+a.UUID, nil, "X-Auth-Token", tok)
	require.Equal(t, http.StatusOK, st, "alice reads the copy in Ironic with her own token: %s", raw)
	var copyDoc struct {
		Owner    string `json:"owner"`
		NodeUUID string `json:"node_uuid"`
		State    string `json:"state"`
	}
	require.NoError(t, json.Unmarshal(raw, &copyDoc))
	require.Equal(t, tenant, copyDoc.Owner)
	require.Equal(t, nodes[0], copyDoc.NodeUUID)
	require.Equal(t, "active", copyDoc.State)

	st, _ = apiCall(t, http.MethodGet, api+"/v1/nodes", nil)
	require.Equal(t, http.StatusUnauthorized, st, "Ironic's 401 without a token")
	st, _ = apiCall(t, http.MethodGet, api+"/v1/allocations/"+a.UUID, nil)
	require.Equal(t, http.StatusUnauthorized, st, "metalloc's 401 without a token")

	st, raw = apiCall(t, http.MethodDelete, api+"/v1/allocations/"+a.UUID, nil, "X-Auth-Token", tok)
	require.Equal(t, http.StatusNoContent, st, "%s", raw)
	st, _ = apiCall(t, http.MethodGet, ir.URL+"/v1/allocations/"+a.UUID, nil, "X-Auth-Token", tok)
	require.Equal(t, http.StatusNotFound, st)
	dbtest.WaitFor(t, time.Minute, "the node free in metalloc again", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM free_nodes WHERE uuid = $1`, nodes[0]) == 1
	})
	agree(t, ir, pool, "ks")
}
