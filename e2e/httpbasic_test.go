package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/httpbasic"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/allocations"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/nodes"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/placement/client"
)

// htpasswd writes an Apache htpasswd file of bcrypt hashes (as `htpasswd
// -B` does) for user:password pairs.
func htpasswd(t *testing.T, path string, pairs ...string) {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(pairs[i+1]), bcrypt.MinCost)
		require.NoError(t, err)
		b.WriteString(pairs[i] + ":" + string(h) + "\n")
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
}

// basicCLI runs `openstack --os-auth-type http_basic` against endpoint.
func basicCLI(endpoint, user, password string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{"--os-auth-type", "http_basic", "--os-username", user, "--os-password", password,
		"--os-endpoint", endpoint}, args...)
	cmd := exec.CommandContext(ctx, "openstack", argv...)
	cmd.Env = append(os.Environ(), "PYTHONWARNINGS=ignore", "OS_CLOUD=", "OS_CLIENT_CONFIG_FILE=/dev/null")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestHTTPBasicEndToEnd runs metalloc-api and metalloc-placement with
// auth_strategy http_basic (one htpasswd file of bcrypt hashes) and
// conductors that allocate through Placement with placement_backend
// http_basic credentials. gophercloud's httpbasic client enrols and
// allocates, the openstack CLI (`--os-auth-type http_basic`) lists nodes
// and allocates; a wrong password or none is 401 with a Basic challenge,
// and a user added to the file later is let in without a restart.
func TestHTTPBasicEndToEnd(t *testing.T) {
	t.Parallel()
	users := filepath.Join(t.TempDir(), "htpasswd")
	htpasswd(t, users, "operator", "op-pw", "conductor", "cond-pw")
	stack, _ := startStackOpts(t, 2, devstack.Options{
		AllocationBackend: "placement",
		Env: []string{
			"METALLOC_API_AUTH_STRATEGY=http_basic",
			"METALLOC_API_HTTP_BASIC_AUTH_USER_FILE=" + users,
			"METALLOC_PLACEMENT_AUTH_STRATEGY=http_basic",
			"METALLOC_PLACEMENT_HTTP_BASIC_AUTH_USER_FILE=" + users,
			"METALLOC_PLACEMENT_BACKEND_AUTH_STRATEGY=http_basic",
			"METALLOC_PLACEMENT_BACKEND_USERNAME=conductor",
			"METALLOC_PLACEMENT_BACKEND_PASSWORD=cond-pw",
			"METALLOC_LOG_LEVEL=debug", // for requireNoSecrets
		},
	})
	ctx := context.Background()

	bm, err := httpbasic.NewBareMetalHTTPBasic(httpbasic.EndpointOpts{
		IronicEndpoint: stack.APIURL + "/v1", IronicUser: "operator", IronicUserPassword: "op-pw",
	})
	require.NoError(t, err)
	bm.Microversion = "1.82"
	mine := firstOfOneClass(t, 3)
	rc := mine[0].ResourceClass
	enroll(t, ctx, bm, mine)
	// The resource tracker mirrors them into Placement (with the
	// conductors' basic credentials) before they can be allocated.
	pc := client.NewWithCredential(stack.BackendPlacementURL, client.Basic{User: "operator", Password: "op-pw"}, http.DefaultClient)
	require.Eventually(t, func() bool {
		c, err := pc.AllocationCandidates(ctx, neturl.Values{"resources": {client.NormalizeClass(rc) + ":1"}})
		return err == nil && len(c.AllocationRequests) == 3
	}, 60*time.Second, 100*time.Millisecond)

	a, err := allocations.Create(ctx, bm, allocations.CreateOpts{ResourceClass: rc, Name: "gophercloud-1"}).Extract()
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		a, err = allocations.Get(ctx, bm, a.UUID).Extract()
		return err == nil && a.State == "active"
	}, 60*time.Second, 100*time.Millisecond, "the conductors allocate through Placement with their basic credentials: %+v", a)

	out, err := basicCLI(stack.APIURL, "operator", "op-pw", "baremetal", "node", "list", "-f", "json")
	require.NoError(t, err, out)
	require.Len(t, column(t, out, "Name"), 3)
	out, err = basicCLI(stack.APIURL, "operator", "op-pw", "baremetal", "allocation", "create",
		"--resource-class", rc, "--name", "cli-1", "--wait", "60", "-f", "json")
	require.NoError(t, err, out)
	var alloc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &alloc), out)
	require.Equal(t, "active", alloc["state"], out)

	out, err = basicCLI(stack.APIURL, "operator", "wrong", "baremetal", "node", "list")
	require.Error(t, err)
	require.Contains(t, out, "401", out)

	wrong, err := httpbasic.NewBareMetalHTTPBasic(httpbasic.EndpointOpts{
		IronicEndpoint: stack.APIURL + "/v1", IronicUser: "operator", IronicUserPassword: "wrong",
	})
	require.NoError(t, err)
	_, err = nodes.List(wrong, nil).AllPages(ctx)
	require.True(t, gophercloud.ResponseCodeIs(err, http.StatusUnauthorized), "%v", err)

	for _, url := range []string{stack.APIURL + "/v1/nodes", stack.BackendPlacementURL + "/resource_providers"} {
		resp, err := http.Get(url)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, url)
		require.Equal(t, `Basic realm="metalloc"`, resp.Header.Get("WWW-Authenticate"), url)
	}

	// A user added to the file is let in without a restart.
	htpasswd(t, users, "operator", "op-pw", "conductor", "cond-pw", "late", "late-pw")
	require.Eventually(t, func() bool {
		late, _ := httpbasic.NewBareMetalHTTPBasic(httpbasic.EndpointOpts{
			IronicEndpoint: stack.APIURL + "/v1", IronicUser: "late", IronicUserPassword: "late-pw",
		})
		_, err := nodes.List(late, nil).AllPages(ctx)
		return err == nil
	}, 30*time.Second, 200*time.Millisecond)

	requireNoSecrets(t, stack, "op-pw", "cond-pw", "late-pw",
		base64.StdEncoding.EncodeToString([]byte("operator:op-pw")), base64.StdEncoding.EncodeToString([]byte("conductor:cond-pw")))
}
