package devstack

import (
	"context"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
)

// startTestIronic starts an Ironic for a test on the test PostgreSQL
// (DATABASE_URL), showing its logs when the test fails, stopped at cleanup.
func startTestIronic(t *testing.T, opts IronicOptions) *Ironic {
	t.Helper()
	opts.DatabaseURL = os.Getenv("DATABASE_URL")
	if opts.DatabaseURL == "" {
		t.Fatal("DATABASE_URL is not set: run the tests with `make test` or `metalloc-manage dev exec`")
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	opts.Log = zaptest.NewLogger(t)
	ir, err := StartIronic(context.Background(), opts)
	require.NoError(t, err, "this test needs Ironic 21.4: apt-get install -y %s", IronicPackages)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Ironic logs:\n%s", ir.LogTail(40))
		}
		ir.Stop()
	})
	return ir
}

// TestIronic starts the real Ironic 21.4 (two conductors, json-rpc,
// fake-hardware, PostgreSQL), enrols a node through it to available,
// deploys it, and stops it: every process group gone, the database
// dropped. The packages must be installed (scripts/test-deps.sh): a
// missing package fails the test, it does not skip it.
func TestIronic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := startTestIronic(t, IronicOptions{})
	require.Len(t, ir.Hosts, 2)

	var root struct {
		Default struct {
			Version    string `json:"version"`
			MinVersion string `json:"min_version"`
		} `json:"default_version"`
	}
	_, err := ir.Do(ctx, http.MethodGet, "/", nil, &root)
	require.NoError(t, err)
	require.Equal(t, "1.82", root.Default.Version)

	uuids, err := ir.EnrollAvailable(ctx, []IronicNode{{Name: "n1", ResourceClass: "gold", Traits: []string{"CUSTOM_A"}},
		{Name: "n2", ResourceClass: "gold"}}, 2)
	require.NoError(t, err)
	require.Len(t, uuids, 2)
	// The two nodes are spread over the conductors' hash ring; both
	// conductors answer (a deploy goes to the node's conductor).
	for _, u := range uuids {
		require.NoError(t, ir.SetProvisionState(ctx, u, "active", "active", 2*time.Minute))
	}
	var n struct {
		Conductor string   `json:"conductor"`
		Traits    []string `json:"traits"`
	}
	_, err = ir.Do(ctx, http.MethodGet, "/v1/nodes/n1", nil, &n)
	require.NoError(t, err)
	require.Contains(t, ir.Hosts, n.Conductor)
	require.Equal(t, []string{"CUSTOM_A"}, n.Traits)

	// Clones of an available node, written into Ironic's database, are
	// nodes Ironic allocates like any other.
	tmpl, err := ir.EnrollAvailable(ctx, []IronicNode{{Name: "tmpl", ResourceClass: "clone", Traits: []string{"CUSTOM_C"}}}, 1)
	require.NoError(t, err)
	clones, err := ir.CloneNodes(ctx, tmpl[0], 50, "clone")
	require.NoError(t, err)
	require.Len(t, clones, 50)
	var list struct {
		Nodes []struct {
			Traits         []string `json:"traits"`
			ProvisionState string   `json:"provision_state"`
			PowerState     string   `json:"power_state"`
		} `json:"nodes"`
	}
	_, err = ir.Do(ctx, http.MethodGet, "/v1/nodes?resource_class=clone&fields=traits,provision_state,power_state&limit=100", nil, &list)
	require.NoError(t, err)
	require.Len(t, list.Nodes, 51)
	for _, n := range list.Nodes {
		require.Equal(t, []string{"CUSTOM_C"}, n.Traits)
		require.Equal(t, "available", n.ProvisionState)
		require.Equal(t, "power off", n.PowerState)
	}
	var alloc struct {
		UUID string `json:"uuid"`
	}
	_, err = ir.Do(ctx, http.MethodPost, "/v1/allocations", map[string]any{"resource_class": "clone",
		"candidate_nodes": []string{clones[7]}, "traits": []string{"CUSTOM_C"}}, &alloc)
	require.NoError(t, err)
	dbtest.WaitFor(t, 2*time.Minute, "Ironic's allocation on a clone active", func() bool {
		var a struct {
			State    string  `json:"state"`
			NodeUUID *string `json:"node_uuid"`
		}
		_, err := ir.Do(ctx, http.MethodGet, "/v1/allocations/"+alloc.UUID, nil, &a)
		require.NoError(t, err)
		require.NotEqual(t, "error", a.State)
		return a.State == "active" && a.NodeUUID != nil && *a.NodeUUID == clones[7]
	})

	// Ironic unreachable while its API is stopped, back after StartAPI.
	ir.StopAPI()
	_, err = ir.Do(ctx, http.MethodGet, "/", nil, nil)
	require.Error(t, err)
	require.NoError(t, ir.StartAPI(ctx))
	_, err = ir.Do(ctx, http.MethodGet, "/v1/nodes/n2", nil, nil)
	require.NoError(t, err)

	pids := []int{ir.api.Pid()}
	for _, c := range ir.conductors {
		pids = append(pids, c.Pid())
	}
	ir.Stop()
	for _, pid := range pids {
		require.Equal(t, syscall.ESRCH, syscall.Kill(-pid, 0), "process group %d still there after Stop", pid)
	}
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", ir.Database).Scan(&exists))
	require.False(t, exists, "Ironic's database %s still there after Stop", ir.Database)
}

// TestIronicHTTPBasic: with auth_strategy http_basic, Ironic refuses a
// request without credentials and serves the configured user, its API
// under uWSGI (IronicOptions.UWSGI).
func TestIronicHTTPBasic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Its API served as Debian's package serves it (uWSGI, the package's
	// ini; two processes here), as the side-by-side benchmark does.
	ir := startTestIronic(t, IronicOptions{AuthStrategy: IronicHTTPBasic, BasicUsers: map[string]string{"op": "secret"}, Conductors: 1,
		UWSGI: true, APIWorkers: 2})
	resp, err := http.Get(ir.URL + "/v1/nodes")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	_, err = ir.Do(ctx, http.MethodGet, "/v1/nodes", nil, nil)
	require.NoError(t, err)
}
