package devstack

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/examples"
	"github.com/metalloc/metalloc/internal/freeport"
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
	require.Equal(t, clones[7], waitIronicAllocation(t, ir, alloc.UUID), "Ironic's allocation on a clone")

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

// TestIronicEnrollFleet enrols the sample fleet (examples/dc1-nodes.yaml,
// 240 nodes) with EnrollFleet in an Ironic on the port asked for: every
// node is in Ironic, available and powered off, with the file's uuid,
// name, resource class, properties, extra and traits, and Ironic itself
// allocates them (it allocates only nodes with a power state).
func TestIronicEnrollFleet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	port, err := freeport.Pick()
	require.NoError(t, err)
	ir := startTestIronic(t, IronicOptions{Port: port, Conductors: 1})
	require.Equal(t, "http://127.0.0.1:"+strconv.Itoa(port), ir.URL)

	nodes, err := ParseIronicNodes(examples.DC1Nodes)
	require.NoError(t, err)
	require.Len(t, nodes, 240)
	uuids, err := ir.EnrollFleet(ctx, nodes)
	require.NoError(t, err)
	require.Len(t, uuids, 240)
	for k, n := range nodes {
		require.Equal(t, n.UUID, uuids[k])
	}

	var list struct {
		Nodes []struct {
			UUID           string         `json:"uuid"`
			Name           string         `json:"name"`
			ResourceClass  string         `json:"resource_class"`
			ProvisionState string         `json:"provision_state"`
			PowerState     *string        `json:"power_state"`
			Properties     map[string]any `json:"properties"`
			Extra          map[string]any `json:"extra"`
			Traits         []string       `json:"traits"`
		} `json:"nodes"`
	}
	_, err = ir.Do(ctx, http.MethodGet, "/v1/nodes?detail=true&limit=1000", nil, &list)
	require.NoError(t, err)
	require.Len(t, list.Nodes, 240)
	byUUID := map[string]int{}
	for k, n := range nodes {
		byUUID[n.UUID] = k
	}
	for _, got := range list.Nodes {
		want := nodes[byUUID[got.UUID]]
		require.Equal(t, want.Name, got.Name)
		require.Equal(t, want.ResourceClass, got.ResourceClass)
		require.Equal(t, "available", got.ProvisionState, got.Name)
		require.NotNil(t, got.PowerState, got.Name)
		require.Equal(t, "power off", *got.PowerState, got.Name)
		require.ElementsMatch(t, want.Traits, got.Traits, got.Name)
		require.Equal(t, want.Extra["rack"], got.Extra["rack"], got.Name)
		require.Equal(t, want.Properties["cpus"], got.Properties["cpus"], got.Name)
	}

	// Ironic allocates a copied node (the first node, enrolled through the
	// API, is storage: not a candidate here).
	var a struct {
		UUID string `json:"uuid"`
	}
	_, err = ir.Do(ctx, http.MethodPost, "/v1/allocations", map[string]any{
		"resource_class": "baremetal-gold", "traits": []string{"CUSTOM_NVME"}}, &a)
	require.NoError(t, err)
	require.NotEqual(t, nodes[0].UUID, waitIronicAllocation(t, ir, a.UUID))

	_, err = ParseIronicNodes([]byte("nodes:\n- name: x\n  ports: []\n"))
	require.ErrorContains(t, err, `unknown field "ports"`)
	_, err = ParseIronicNodes([]byte("nodes:\n- name: x\n  driver: ipmi\n"))
	require.ErrorContains(t, err, "fake-hardware only")
}

// waitIronicAllocation waits up to 2 minutes until Ironic's allocation
// uuid is active (failing the test at once if it goes to error) and
// returns its node's uuid.
func waitIronicAllocation(t *testing.T, ir *Ironic, uuid string) string {
	t.Helper()
	var node string
	dbtest.WaitFor(t, 2*time.Minute, "Ironic's allocation "+uuid+" active", func() bool {
		var a struct {
			State    string  `json:"state"`
			NodeUUID *string `json:"node_uuid"`
		}
		_, err := ir.Do(context.Background(), http.MethodGet, "/v1/allocations/"+uuid, nil, &a)
		require.NoError(t, err)
		require.NotEqual(t, "error", a.State)
		if a.State == "active" && a.NodeUUID != nil {
			node = *a.NodeUUID
		}
		return node != ""
	})
	return node
}
