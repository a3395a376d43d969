package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/cmd/internal/cli"
	"github.com/metalloc/metalloc/conductor"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/placement/placementtest"
)

// statusEnv is a fresh database with two nodes mirrored into an in-process
// metalloc-placement.
func statusEnv(t *testing.T) (dbURL, endpoint string, pool *pgxpool.Pool, pc *client.Client, n uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	dbURL = dbtest.NewURL(t)
	pool, err := db.Open(ctx, dbURL, db.PoolOptions{MaxConns: 10, ApplicationName: "status_test"})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	srv := placementtest.NewServerOn(t, pool, placement.Options{})
	pc = client.New(srv.URL, "admin", 10*time.Second)

	_, n = dbtest.Node(t, pool, dbtest.NodeSpec{Name: "n1", Properties: map[string]any{"cpus": 8, "memory_mb": 1024}})
	dbtest.Node(t, pool, dbtest.NodeSpec{Name: "n2"})
	tr := conductor.NewTracker(pool, pc, conductor.TrackerConfig{ReportGenericResources: true}, zaptest.NewLogger(t))
	_, err = tr.Sync(ctx)
	require.NoError(t, err)
	return dbURL, srv.URL, pool, pc, n
}

// runManage runs metalloc-manage args with config file contents yaml and
// returns its output (stdout, then stderr) and exit status (as main would
// exit).
func runManage(t *testing.T, yaml string, args ...string) (string, int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "metalloc.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	root := newRoot()
	var out, stderr bytes.Buffer
	root.SetOut(&out)
	code := cli.Run(root, append(args, "--config", path), &stderr)
	return out.String() + stderr.String(), code
}

func TestUpgradeCheckAndOnlineDataMigrations(t *testing.T) {
	dbURL, endpoint, pool, pc, n := statusEnv(t)
	ctx := context.Background()
	yaml := "database:\n  url: " + dbURL + "\nplacement_backend:\n  endpoint: " + endpoint + "\n"

	out, code := runManage(t, yaml, "status", "upgrade-check")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "| Check ")
	require.Regexp(t, `\| Allocation ratio options +\| Success`, out)

	// Ratios of 0.0, as an old release left them (metalloc-placement
	// refuses to write them, so behind its back).
	_, err := pool.Exec(ctx, `UPDATE placement.inventories i SET allocation_ratio = 0
	      FROM placement.resource_classes c WHERE c.id = i.resource_class_id AND c.name IN ('VCPU', 'MEMORY_MB')`)
	require.NoError(t, err)
	out, code = runManage(t, yaml, "status", "upgrade-check")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "Warning")
	require.Contains(t, out, "2 inventories of 1 resource providers")

	// An explicit 0.0 option fails, whatever else.
	out, code = runManage(t, yaml+"  cpu_allocation_ratio: 0.0\n", "status", "upgrade-check")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "cpu_allocation_ratio=0.0")
	out, code = runManage(t, yaml+"  allocation_ratios:\n    CUSTOM_GOLD: 0\n", "status", "upgrade-check")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "allocation_ratios.CUSTOM_GOLD=0.0")

	// The migration repairs them: override for RAM, initial for VCPU.
	out, code = runManage(t, yaml+"  ram_allocation_ratio: 1.25\n", "db", "online-data-migrations")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `\| fill_zero_allocation_ratios \| 2 +\| 2 +\|`, out)
	inv, err := pc.GetInventories(ctx, n)
	require.NoError(t, err)
	require.Equal(t, 16.0, inv.Inventories["VCPU"].AllocationRatio)
	require.Equal(t, 1.25, inv.Inventories["MEMORY_MB"].AllocationRatio)
	require.Equal(t, 1.0, inv.Inventories["CUSTOM_GOLD"].AllocationRatio)

	out, code = runManage(t, yaml, "status", "upgrade-check")
	require.Equal(t, 0, code, out)
	out, code = runManage(t, yaml, "db", "online-data-migrations")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `\| fill_zero_allocation_ratios \| 0 +\| 0 +\|`, out)

	// An inventory shrunk below its allocations' usage (accepted, as
	// Placement 8.0) is a warning naming the provider.
	require.NoError(t, pc.PutAllocations(ctx, uuid.New(), client.Claim{
		Request: client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{
			n: {Resources: map[string]int64{"VCPU": 4}}}},
		ProjectID: "p", UserID: "u",
	}))
	_, err = pool.Exec(ctx, `UPDATE placement.inventories i SET total = 2, max_unit = 2, allocation_ratio = 1
	      FROM placement.resource_classes c WHERE c.id = i.resource_class_id AND c.name = 'VCPU'`)
	require.NoError(t, err)
	out, code = runManage(t, yaml, "status", "upgrade-check")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "1 inventories have allocations above their capacity: "+n.String()+" (n1) VCPU: 4 used of 2")

	// Placement unreachable: the check cannot pass, the migration reports it.
	bad := "database:\n  url: " + dbURL + "\nplacement_backend:\n  endpoint: http://127.0.0.1:1\n  timeout: 1s\n"
	out, code = runManage(t, bad, "status", "upgrade-check")
	require.Equal(t, 2, code, out)
	out, code = runManage(t, bad, "db", "online-data-migrations")
	require.Equal(t, 1, code, out)
}
