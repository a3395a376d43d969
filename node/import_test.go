package node_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/node"
)

// dc1 is the sample data centre the documentation uses (make run's
// fleet), relative to this package.
const dc1 = "../examples/dc1-nodes.yaml"

func TestImportDC1(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	raw, err := os.ReadFile(dc1)
	require.NoError(t, err)

	var calls, lastDone, lastTotal atomic.Int64
	progress := func(done, total int) {
		calls.Add(1)
		lastDone.Store(int64(done))
		lastTotal.Store(int64(total))
	}
	res, err := node.Import(ctx, e.store, strings.NewReader(string(raw)), node.ImportOptions{MakeAvailable: true}, progress)
	require.NoError(t, err)
	require.Equal(t, 240, res.Total)
	require.Equal(t, 240, res.Created)
	require.Equal(t, 240, res.MadeAvailable)
	require.Len(t, res.Nodes, 240)
	require.EqualValues(t, 240, calls.Load())
	require.EqualValues(t, 240, lastDone.Load())
	require.EqualValues(t, 240, lastTotal.Load())

	var total, available int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE provision_state = 'available'
		AND power_state = 'power off' AND NOT maintenance) FROM nodes`).Scan(&total, &available))
	require.Equal(t, 240, total)
	require.Equal(t, 240, available)

	n, err := e.store.Get(ctx, "r1-rack01-n1")
	require.NoError(t, err)
	require.Equal(t, uuid.MustParse("6301bbfc-a0c5-454e-8ff9-bb510944fe0c"), n.UUID)
	require.Equal(t, "baremetal-storage", *n.ResourceClass)
	require.Equal(t, []string{"CUSTOM_25GBE", "CUSTOM_HDD_JBOD", "CUSTOM_ROW1_RACK01", "HW_CPU_X86_AVX2"}, n.Traits)
	require.Equal(t, float64(24), n.Properties["cpus"])
	require.Equal(t, "boot_mode:uefi", n.Properties["capabilities"])
	require.Equal(t, float64(1), n.Extra["rack"])
	require.Equal(t, "fake", n.Interfaces["deploy_interface"])

	// Idempotent: a second run changes nothing.
	var updatedAt string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT coalesce(max(updated_at)::text, '') FROM nodes`).Scan(&updatedAt))
	res, err = node.Import(ctx, e.store, strings.NewReader(string(raw)), node.ImportOptions{MakeAvailable: true}, nil)
	require.NoError(t, err)
	require.Equal(t, 240, res.Unchanged)
	require.Zero(t, res.Created+res.Updated+res.MadeAvailable)
	var updatedAt2 string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT coalesce(max(updated_at)::text, '') FROM nodes`).Scan(&updatedAt2))
	require.Equal(t, updatedAt, updatedAt2)
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM nodes`).Scan(&total))
	require.Equal(t, 240, total)

	// The API sees them (name lookup, trait list).
	b := e.must(http.StatusOK, http.MethodGet, "/v1/nodes/r1-rack01-n2/traits", "1.82", nil).body
	require.Equal(t, []any{"CUSTOM_25GBE", "CUSTOM_NVME", "CUSTOM_ROW1_RACK01", "HW_CPU_X86_AVX512F"}, b["traits"])
}

func TestImportUpdates(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	id := uuid.NewString()
	file := `{"nodes": [
		{"uuid": "` + id + `", "name": "imp-1", "driver": "fake-hardware", "resource_class": "rc-a",
		 "properties": {"cpus": 4}, "traits": ["CUSTOM_A"], "ports": [{"address": "52:54:00:00:00:01"}]},
		{"name": "imp-2", "driver": "fake-hardware"}
	]}`
	res, err := node.Import(ctx, e.store, strings.NewReader(file), node.ImportOptions{}, nil)
	require.NoError(t, err)
	require.Equal(t, 2, res.Created)
	require.Len(t, res.Warnings, 1)
	n, err := e.store.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "enroll", n.ProvisionState)
	require.Equal(t, []string{"CUSTOM_A"}, n.Traits)

	// Matched by uuid (renamed) and by name; fields and traits updated.
	file2 := `nodes:
- uuid: ` + id + `
  name: imp-1-renamed
  driver: fake-hardware
  resource_class: rc-b
  traits: [CUSTOM_B, CUSTOM_C]
- name: imp-2
  driver: fake-hardware
  extra: {k: v}
`
	res, err = node.Import(ctx, e.store, strings.NewReader(file2), node.ImportOptions{MakeAvailable: true}, nil)
	require.NoError(t, err)
	require.Equal(t, 2, res.Updated)
	require.Equal(t, 2, res.MadeAvailable)
	n, err = e.store.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "imp-1-renamed", *n.Name)
	require.Equal(t, "rc-b", *n.ResourceClass)
	require.Equal(t, []string{"CUSTOM_B", "CUSTOM_C"}, n.Traits)
	require.Equal(t, float64(4), n.Properties["cpus"]) // not in the file: kept
	require.Equal(t, "available", n.ProvisionState)
	n2, err := e.store.Get(ctx, "imp-2")
	require.NoError(t, err)
	require.Equal(t, "v", n2.Extra["k"])

	// Bad entries are reported per node; the good ones still import.
	bad := `{"nodes": [{"name": "imp-3"}, {"name": "imp-4", "driver": "fake-hardware", "traits": ["bogus"]},
		{"name": "imp-5", "driver": "fake-hardware"}]}`
	res, err = node.Import(ctx, e.store, strings.NewReader(bad), node.ImportOptions{}, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "node 1 (imp-3): Schema error for node: 'driver' is a required property")
	require.Contains(t, err.Error(), "node 2 (imp-4)")
	require.Equal(t, 1, res.Created)

	_, err = node.Import(ctx, e.store, strings.NewReader(`[1, 2]`), node.ImportOptions{}, nil)
	require.Error(t, err)
	_, err = node.Import(ctx, e.store, strings.NewReader(`{"servers": []}`), node.ImportOptions{}, nil)
	require.ErrorContains(t, err, "unknown top-level key")
}

// TestImportBulk: new nodes of a large file go in by COPY, in file order,
// driven to available; an entry naming a node met earlier in the same file
// updates it; a new entry whose name an existing node holds fails alone;
// the node tables are vacuumed and analyzed afterwards.
func TestImportBulk(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	_, err := node.Import(ctx, e.store, strings.NewReader(`{"nodes": [{"name": "taken", "driver": "fake-hardware"}]}`),
		node.ImportOptions{}, nil)
	require.NoError(t, err)

	var b strings.Builder
	b.WriteString(`{"nodes": [`)
	const n = 1500
	for i := range n {
		fmt.Fprintf(&b, `{"name": "bulk-%d", "driver": "fake-hardware", "resource_class": "rc", "traits": ["CUSTOM_T%d"]},`, i, i%3)
	}
	b.WriteString(`{"name": "bulk-7", "driver": "fake-hardware", "description": "second"},`)
	b.WriteString(`{"uuid": "` + uuid.NewString() + `", "name": "taken", "driver": "fake-hardware"}]}`)
	res, err := node.Import(ctx, e.store, strings.NewReader(b.String()), node.ImportOptions{MakeAvailable: true}, nil)
	require.ErrorContains(t, err, "node 1502 (taken): A node with name taken already exists.")
	require.Equal(t, n, res.Created)
	require.Equal(t, 1, res.Updated)
	require.Equal(t, n, res.MadeAvailable)
	require.Len(t, res.Nodes, n+1)

	first, err := e.store.Get(ctx, "bulk-0")
	require.NoError(t, err)
	require.Equal(t, first.UUID, res.Nodes[0])
	require.Equal(t, "available", first.ProvisionState)
	require.Equal(t, "power off", *first.PowerState)
	require.Equal(t, []string{"CUSTOM_T0"}, first.Traits)
	require.NotNil(t, first.UpdatedAt)
	require.Equal(t, "fake", first.Interfaces["deploy_interface"])
	seventh, err := e.store.Get(ctx, "bulk-7")
	require.NoError(t, err)
	require.Equal(t, "second", *seventh.Description)
	require.Equal(t, []string{"CUSTOM_T1"}, seventh.Traits)

	var reltuples float64
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE relname = 'nodes'`).Scan(&reltuples))
	require.InDelta(t, n+1, reltuples, 1)
	var vacuumed int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_user_tables
		WHERE relname IN ('nodes', 'node_traits') AND last_vacuum IS NOT NULL`).Scan(&vacuumed))
	require.Equal(t, 2, vacuumed, "VACUUM (ANALYZE) after the import")
}
