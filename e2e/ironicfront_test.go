package e2e

import (
	"context"
	"encoding/json"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// startIronic starts the real Ironic 21.4 for the test (Debian's packages;
// logs shown when the test fails).
func startIronic(t *testing.T, opts devstack.IronicOptions) *devstack.Ironic {
	t.Helper()
	opts.DatabaseURL, opts.Dir, opts.Log = os.Getenv("DATABASE_URL"), t.TempDir(), zaptest.NewLogger(t)
	ir, err := devstack.StartIronic(context.Background(), opts)
	require.NoError(t, err, "this test needs Ironic 21.4: apt-get install -y %s", devstack.IronicPackages)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Ironic logs:\n%s", ir.LogTail(40))
		}
		ir.Stop()
	})
	return ir
}

// TestIronicFrontMirror runs metalloc-api and two conductors in front of
// the real Ironic (two conductors, json-rpc, fake-hardware) and drives it
// with the openstack CLI pointed at metalloc: the conductors mirror
// Ironic's nodes; the node list is Ironic's; a node put into maintenance
// through metalloc is in maintenance in the mirror by the time the CLI
// returns, and `allocation create --wait` takes another node. The
// conductor holding the sync lease is SIGKILLed: the other takes the
// lease over and mirrors a node created in Ironic afterwards.
func TestIronicFrontMirror(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ir := startIronic(t, devstack.IronicOptions{})
	names := []string{"front-1", "front-2", "front-3"}
	var nodes []devstack.IronicNode
	for _, n := range names {
		nodes = append(nodes, devstack.IronicNode{Name: n, ResourceClass: "front"})
	}
	_, err := ir.EnrollAvailable(ctx, nodes, 3)
	require.NoError(t, err)

	url := dbtest.NewURL(t)
	stack, _ := startStackOpts(t, 2, devstack.Options{DatabaseURL: url, Env: []string{
		"METALLOC_IRONIC_ENDPOINT=" + ir.URL,
		"METALLOC_IRONIC_SYNC_SCHEDULE=@every 1s",
		"METALLOC_CONDUCTOR_HEARTBEAT_INTERVAL=300ms",
		"METALLOC_CONDUCTOR_HEARTBEAT_TIMEOUT=5s",
		"METALLOC_CONDUCTOR_TAKEOVER_SCHEDULE=@every 1s",
	}})
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	mirrored := func(name string) bool {
		return dbtest.Count(t, pool, "SELECT count(*) FROM nodes WHERE name = $1", name) == 1
	}
	dbtest.WaitFor(t, 2*time.Minute, "the conductors to mirror Ironic's nodes", func() bool {
		return dbtest.Count(t, pool, "SELECT count(*) FROM nodes WHERE resource_class = 'front'") == len(names)
	})

	cli := okCLI(t, stack.APIURL)
	var listed []struct {
		Name string `json:"Name"`
	}
	require.NoError(t, json.Unmarshal([]byte(cli("baremetal", "node", "list", "-f", "json")), &listed))
	require.Len(t, listed, len(names))

	cli("baremetal", "node", "maintenance", "set", "front-1", "--reason", "fan")
	require.Equal(t, 1, dbtest.Count(t, pool, "SELECT count(*) FROM nodes WHERE name = 'front-1' AND maintenance"),
		"the mirror did not see the maintenance set through metalloc")
	var alloc struct {
		State    string `json:"state"`
		NodeUUID string `json:"node_uuid"`
	}
	require.NoError(t, json.Unmarshal([]byte(cli("baremetal", "allocation", "create", "--resource-class", "front",
		"--wait", "60", "-f", "json")), &alloc))
	require.Equal(t, "active", alloc.State)
	require.Zero(t, dbtest.Count(t, pool, "SELECT count(*) FROM nodes WHERE name = 'front-1' AND uuid = $1", alloc.NodeUUID))

	// SIGKILL the lease holder: the other conductor takes over.
	var holder string
	require.NoError(t, pool.QueryRow(ctx, `SELECT c.hostname FROM ironic_sync_lease l JOIN conductors c ON c.id = l.holder`).Scan(&holder))
	var other string
	for _, p := range stack.Conductors {
		if p.Name == holder {
			require.NoError(t, p.Signal(syscall.SIGKILL))
			require.Error(t, p.Wait(30*time.Second))
		} else {
			other = p.Name
		}
	}
	require.NotEmpty(t, other)
	_, err = ir.EnrollAvailable(ctx, []devstack.IronicNode{{Name: "front-late", ResourceClass: "front"}}, 1)
	require.NoError(t, err)
	dbtest.WaitFor(t, 2*time.Minute, "the standby conductor to take the lease and mirror the new node", func() bool {
		return mirrored("front-late")
	})
	var now string
	require.NoError(t, pool.QueryRow(ctx, `SELECT c.hostname FROM ironic_sync_lease l JOIN conductors c ON c.id = l.holder`).Scan(&now))
	require.Equal(t, other, now)
}
