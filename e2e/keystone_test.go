package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/nodes"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/internal/keystonetest"
)

// keystoneUsers are the people of TestKeystoneEndToEnd: name, password,
// and where they have which role ("system" or a project name).
var keystoneUsers = []struct{ name, password, scope, role string }{
	{"metalloc", "metalloc-service-pw", "service", "service"},
	{"metalloc", "metalloc-service-pw", "service", "admin"},
	{"operator", "operator-pw", "system", "admin"},
	{"auditor", "auditor-pw", "system", "reader"},
	{"alice", "alice-pw", "tenant-a", "member"},
	{"bob", "bob-pw", "tenant-b", "member"},
}

// cli runs the openstack CLI (Debian's python3-openstackclient with the
// baremetal and placement plugins) as cloud in clouds.yaml and returns its
// output; it fails the test unless the exit status is 0.
func cli(t *testing.T, cloudsYAML, cloud string, args ...string) string {
	t.Helper()
	out, err := cliRun(cloudsYAML, cloud, args...)
	require.NoError(t, err, "openstack --os-cloud %s %s:\n%s", cloud, strings.Join(args, " "), out)
	return out
}

func cliRun(cloudsYAML, cloud string, args ...string) (string, error) {
	return oscRun([]string{"OS_CLIENT_CONFIG_FILE=" + cloudsYAML}, append([]string{"--os-cloud", cloud}, args...)...)
}

// nodeNames decodes `-f json` node or allocation listings into the sorted
// values of column col.
func column(t *testing.T, out, col string) []string {
	t.Helper()
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	var vals []string
	for _, r := range rows {
		vals = append(vals, fmt.Sprint(r[col]))
	}
	sort.Strings(vals)
	return vals
}

// TestKeystoneEndToEnd runs metalloc-api, metalloc-placement and two
// conductors (Placement backend) with auth_strategy keystone against a real
// Keystone started from Debian's packages, with users and projects made
// through Keystone's API and metalloc's endpoints in its catalog. The
// openstack CLI, authenticating with a password from clouds.yaml and
// finding the endpoints in the catalog, enrols and allocates as real users
// would: project users see only their own (owned or leased) nodes and
// allocations, a project member's allocation gets its project as owner and
// only its nodes, Placement is for admins, the conductors authenticate to
// Placement with their own Keystone user, and a revoked token is 401.
func TestKeystoneEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ks, err := keystonetest.StartKeystone(ctx, t.TempDir(), zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(ks.Stop)

	projects := map[string]string{}
	for _, p := range []string{"service", "tenant-a", "tenant-b"} {
		projects[p], err = ks.CreateProject(ctx, p)
		require.NoError(t, err)
	}
	userIDs := map[string]string{}
	for _, u := range keystoneUsers {
		if userIDs[u.name] == "" {
			userIDs[u.name], err = ks.CreateUser(ctx, u.name, u.password)
			require.NoError(t, err)
		}
		if u.scope == "system" {
			require.NoError(t, ks.GrantSystemRole(ctx, userIDs[u.name], u.role))
		} else {
			require.NoError(t, ks.GrantProjectRole(ctx, userIDs[u.name], projects[u.scope], u.role))
		}
	}

	stack, _ := startStackOpts(t, 2, devstack.Options{
		AllocationBackend: "placement",
		Env: []string{
			"METALLOC_API_AUTH_STRATEGY=keystone",
			"METALLOC_PLACEMENT_AUTH_STRATEGY=keystone",
			"METALLOC_PLACEMENT_BACKEND_AUTH_STRATEGY=keystone",
			"METALLOC_KEYSTONE_AUTH_URL=" + ks.URL,
			"METALLOC_KEYSTONE_USERNAME=metalloc",
			"METALLOC_KEYSTONE_PASSWORD=metalloc-service-pw",
			"METALLOC_KEYSTONE_TOKEN_CACHE_TIME=1s",
			"METALLOC_LOG_LEVEL=debug", // for requireNoSecrets
		},
	})
	require.NoError(t, ks.AddEndpoint(ctx, "baremetal", "ironic", stack.APIURL))
	require.NoError(t, ks.AddEndpoint(ctx, "placement", "placement", stack.BackendPlacementURL))

	clouds := filepath.Join(t.TempDir(), "clouds.yaml")
	var yml strings.Builder
	yml.WriteString("clouds:\n")
	for _, u := range keystoneUsers {
		if u.name == "metalloc" {
			continue
		}
		scope := "      project_name: " + u.scope + "\n      project_domain_name: Default\n"
		if u.scope == "system" {
			scope = "      system_scope: all\n"
		}
		fmt.Fprintf(&yml, "  %s:\n    region_name: RegionOne\n    identity_api_version: 3\n    auth:\n"+
			"      auth_url: %s\n      username: %s\n      password: %s\n      user_domain_name: Default\n%s",
			u.name, ks.URL, u.name, u.password, scope)
	}
	require.NoError(t, os.WriteFile(clouds, []byte(yml.String()), 0o600))

	// The operator enrols four nodes of one class through gophercloud
	// (Keystone password auth, endpoint from the catalog): two owned by
	// tenant-a, one leased to tenant-b, one of nobody's.
	provider, err := openstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{
		IdentityEndpoint: ks.URL, Username: "operator", Password: "operator-pw", DomainName: "Default",
		Scope: &gophercloud.AuthScope{System: true},
	})
	require.NoError(t, err)
	bm, err := openstack.NewBareMetalV1(provider, gophercloud.EndpointOpts{Region: "RegionOne"})
	require.NoError(t, err)
	bm.Microversion = "1.82"
	mine := firstOfOneClass(t, 4)
	rc := mine[0].ResourceClass
	enroll(t, ctx, bm, mine)
	set := func(name, field, value string) {
		_, err := nodes.Update(ctx, bm, name, nodes.UpdateOpts{nodes.UpdateOperation{
			Op: nodes.AddOp, Path: "/" + field, Value: value,
		}}).Extract()
		require.NoError(t, err)
	}
	set(mine[0].Name, "owner", projects["tenant-a"])
	set(mine[1].Name, "owner", projects["tenant-a"])
	set(mine[2].Name, "lessee", projects["tenant-b"])

	// Node visibility per user, through the CLI.
	all := []string{mine[0].Name, mine[1].Name, mine[2].Name, mine[3].Name}
	sort.Strings(all)
	require.Equal(t, all, column(t, cli(t, clouds, "operator", "baremetal", "node", "list", "-f", "json"), "Name"))
	require.Equal(t, all, column(t, cli(t, clouds, "auditor", "baremetal", "node", "list", "-f", "json"), "Name"))
	aNodes := []string{mine[0].Name, mine[1].Name}
	sort.Strings(aNodes)
	require.Equal(t, aNodes, column(t, cli(t, clouds, "alice", "baremetal", "node", "list", "-f", "json"), "Name"))
	require.Equal(t, []string{mine[2].Name}, column(t, cli(t, clouds, "bob", "baremetal", "node", "list", "-f", "json"), "Name"))
	out, err := cliRun(clouds, "bob", "baremetal", "node", "show", mine[0].Name)
	require.Error(t, err, "bob must not see tenant-a's node")
	require.Contains(t, out, "not be found", out)
	out, err = cliRun(clouds, "auditor", "baremetal", "node", "set", mine[3].Name, "--extra", "x=y")
	require.Error(t, err, "a system reader must not change nodes")
	require.Contains(t, out, "403", out)

	// Placement: the conductors mirrored the nodes with their own Keystone
	// token; admins list providers, project members may not.
	require.Eventually(t, func() bool {
		out, err := cliRun(clouds, "operator", "resource", "provider", "list", "-f", "json")
		if err != nil {
			return false
		}
		var rows []map[string]any
		return json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 4
	}, 60*time.Second, time.Second, "the resource tracker mirrors the 4 nodes into Placement")
	out, err = cliRun(clouds, "alice", "resource", "provider", "list")
	require.Error(t, err, "a project member is no Placement admin")
	require.Contains(t, out, "403", out)

	// alice allocates: her project owns the allocation, which lands on one
	// of her nodes; bob does not see it; bob's lease serves bob.
	out = cli(t, clouds, "alice", "baremetal", "allocation", "create", "--resource-class", rc,
		"--name", "alice-1", "--wait", "120", "-f", "json")
	var alloc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &alloc), out)
	require.Equal(t, "active", alloc["state"], out)
	require.Equal(t, projects["tenant-a"], alloc["owner"], out)
	require.Contains(t, aNodes, nodeName(t, bm, fmt.Sprint(alloc["node_uuid"])))
	require.Equal(t, []string{"alice-1"}, column(t, cli(t, clouds, "alice", "baremetal", "allocation", "list", "-f", "json"), "Name"))
	require.Empty(t, column(t, cli(t, clouds, "bob", "baremetal", "allocation", "list", "-f", "json"), "Name"))
	require.Equal(t, []string{"alice-1"}, column(t, cli(t, clouds, "operator", "baremetal", "allocation", "list", "-f", "json"), "Name"))
	out, err = cliRun(clouds, "alice", "baremetal", "allocation", "create", "--resource-class", rc,
		"--owner", projects["tenant-b"])
	require.Error(t, err, "a project member may not allocate for another project")
	require.Contains(t, out, "403", out)
	out = cli(t, clouds, "bob", "baremetal", "allocation", "create", "--resource-class", rc,
		"--name", "bob-1", "--wait", "120", "-f", "json")
	require.NoError(t, json.Unmarshal([]byte(out), &alloc), out)
	require.Equal(t, "active", alloc["state"], out)
	require.Equal(t, mine[2].Name, nodeName(t, bm, fmt.Sprint(alloc["node_uuid"])), "bob's only node is the one leased to tenant-b")

	// Tokens: none is 401 with Keystone's challenge; a revoked one stops
	// working once its cache entry (token_cache_time 1s) expires, on both APIs.
	get := func(url, token string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("X-Auth-Token", token)
		}
		req.Header.Set("OpenStack-API-Version", "placement 1.39")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	resp := get(stack.APIURL+"/v1/nodes", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Keystone uri=")
	require.Equal(t, http.StatusUnauthorized, get(stack.BackendPlacementURL+"/resource_providers", "").StatusCode)
	require.Equal(t, http.StatusOK, get(stack.APIURL+"/v1", "").StatusCode, "the version document needs no token")

	tok, err := ks.Token(ctx, "operator", "operator-pw", keystonetest.Scope{System: true})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, get(stack.APIURL+"/v1/nodes", tok).StatusCode)
	require.Equal(t, http.StatusOK, get(stack.BackendPlacementURL+"/resource_providers", tok).StatusCode)
	require.NoError(t, ks.RevokeToken(ctx, tok))
	require.Eventually(t, func() bool {
		return get(stack.APIURL+"/v1/nodes", tok).StatusCode == http.StatusUnauthorized &&
			get(stack.BackendPlacementURL+"/resource_providers", tok).StatusCode == http.StatusUnauthorized
	}, 15*time.Second, 200*time.Millisecond, "a revoked token is refused by both APIs")

	// Secrets never reach the logs or /metrics.
	requireNoSecrets(t, stack, "metalloc-service-pw", "operator-pw", "alice-pw", tok)
}

// requireNoSecrets fails if any process log of stack, or the /metrics of
// the API or a conductor, contains one of secrets.
func requireNoSecrets(t *testing.T, stack *devstack.Stack, secrets ...string) {
	t.Helper()
	var texts []string
	for _, p := range append([]*devstack.Process{stack.API, stack.Placement}, stack.Conductors...) {
		if p == nil {
			continue
		}
		raw, err := os.ReadFile(p.LogPath)
		require.NoError(t, err)
		texts = append(texts, string(raw))
		if p.MetricsURL != "" {
			texts = append(texts, scrape(t, p.MetricsURL))
		}
	}
	resp, err := http.Get(stack.APIURL + "/metrics")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	texts = append(texts, string(raw))
	for _, s := range secrets {
		for _, text := range texts {
			require.NotContains(t, text, s, "a secret leaked")
		}
	}
}

// nodeName is the name of the node with the given UUID.
func nodeName(t *testing.T, bm *gophercloud.ServiceClient, id string) string {
	t.Helper()
	n, err := nodes.Get(context.Background(), bm, id).Extract()
	require.NoError(t, err)
	return n.Name
}

// firstOfOneClass is the first n sample nodes of the first node's resource
// class.
func firstOfOneClass(t *testing.T, n int) []sampleNode {
	t.Helper()
	sample := loadSample(t)
	var mine []sampleNode
	for _, s := range sample {
		if s.ResourceClass == sample[0].ResourceClass && len(mine) < n {
			mine = append(mine, s)
		}
	}
	require.Len(t, mine, n)
	return mine
}
