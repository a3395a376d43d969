package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
)

// invServer is testServer that also returns the database pool, so that
// tests can create providers with plain SQL.
func invServer(t testing.TB, opts ...Options) (*httptest.Server, *pgxpool.Pool) {
	t.Helper()
	opts = append(opts, Options{})
	pool := dbtest.New(t)
	require.NoError(t, Prepare(context.Background(), pool))
	return serveOn(t, pool, opts[0]), pool
}

// serveOn serves the Placement API with opts on pool (prepared) until the
// test's end.
func serveOn(t testing.TB, pool *pgxpool.Pool, opts Options) *httptest.Server {
	t.Helper()
	e := echo.New()
	e.HTTPErrorHandler = web.PlacementErrorHandler
	e.JSONSerializer = web.JSONSerializer{}
	e.Use(web.RequestID(zap.NewNop()))
	NewHandler(pool, opts).Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

// mkProvider inserts a root provider with plain SQL and returns its uuid.
func mkProvider(t testing.TB, pool *pgxpool.Pool, name string) string {
	t.Helper()
	id := uuid.New()
	_, err := pool.Exec(context.Background(),
		`INSERT INTO placement.resource_providers (uuid, name) VALUES ($1, $2)`, id, name)
	require.NoError(t, err)
	return id.String()
}

// errOf returns the status, code and detail of a Placement error body.
func errOf(t *testing.T, body map[string]any) (float64, string, string) {
	t.Helper()
	require.NotNil(t, body)
	e := body["errors"].([]any)[0].(map[string]any)
	code, _ := e["code"].(string)
	return e["status"].(float64), code, e["detail"].(string)
}

func TestInventoriesCRUD(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	rp := mkProvider(t, pool, "rp1")
	base := "/resource_providers/" + rp + "/inventories"

	// Empty list.
	st, h, body := call(t, srv, "GET", base, "1.15", "")
	require.Equal(t, 200, st)
	require.EqualValues(t, 0, body["resource_provider_generation"])
	require.Empty(t, body["inventories"])
	require.Equal(t, "no-cache", h.Get("Cache-Control"))

	// Unknown provider, malformed uuid.
	st, _, body = call(t, srv, "GET", "/resource_providers/"+uuid.NewString()+"/inventories", "", "")
	require.Equal(t, 404, st, body)
	st, _, _ = call(t, srv, "GET", "/resource_providers/nope/inventories", "", "")
	require.Equal(t, 404, st)

	// POST: defaults, 201, Location.
	st, h, body = call(t, srv, "POST", base, "1.23", `{"resource_class": "VCPU", "total": 8}`)
	require.Equal(t, 201, st, body)
	require.Equal(t, srv.URL+base+"/VCPU", h.Get("Location"))
	require.EqualValues(t, 1, body["resource_provider_generation"])
	require.EqualValues(t, 0, body["reserved"])
	require.EqualValues(t, 1, body["min_unit"])
	require.EqualValues(t, 2147483647, body["max_unit"])
	require.EqualValues(t, 1, body["step_size"])
	require.EqualValues(t, 1.0, body["allocation_ratio"])

	// POST duplicate: 409 concurrent_update.
	st, _, body = call(t, srv, "POST", base, "1.23", `{"resource_class": "VCPU", "total": 8}`)
	require.Equal(t, 409, st)
	_, code, _ := errOf(t, body)
	require.Equal(t, "placement.concurrent_update", code)

	// POST unknown class: 400; bad body: 400; wrong content type: 415.
	st, _, body = call(t, srv, "POST", base, "1.23", `{"resource_class": "CUSTOM_NOPE", "total": 8}`)
	require.Equal(t, 400, st)
	_, _, detail := errOf(t, body)
	require.Contains(t, detail, "No such resource class CUSTOM_NOPE")
	st, _, _ = call(t, srv, "POST", base, "", `{"resource_class": "DISK_GB", "total": 0}`)
	require.Equal(t, 400, st)
	st, _, _ = call(t, srv, "POST", base, "", `{"resource_class": "DISK_GB", "total": 10, "bogus": 1}`)
	require.Equal(t, 400, st)
	st, _, _ = call(t, srv, "POST", base, "", `{"resource_class": "DISK_GB"`)
	require.Equal(t, 400, st)
	st, _, _ = call(t, srv, "POST", base, "", `{"resource_class": "disk", "total": 10}`)
	require.Equal(t, 400, st)
	st, _, body = callCT(t, srv, "POST", base, "", "text/plain", `{"resource_class": "DISK_GB", "total": 10}`)
	require.Equal(t, 415, st, body)

	// reserved == total: 400 before 1.26, allowed from 1.26.
	st, _, body = call(t, srv, "POST", base, "1.25", `{"resource_class": "DISK_GB", "total": 10, "reserved": 10}`)
	require.Equal(t, 400, st)
	_, _, detail = errOf(t, body)
	require.Contains(t, detail, "greater than or equal to total")
	st, _, body = call(t, srv, "POST", base, "1.26", `{"resource_class": "DISK_GB", "total": 10, "reserved": 11}`)
	require.Equal(t, 400, st)
	_, _, detail = errOf(t, body)
	require.Contains(t, detail, "greater than total")
	st, _, body = call(t, srv, "POST", base, "1.26", `{"resource_class": "DISK_GB", "total": 10, "reserved": 10}`)
	require.Equal(t, 201, st, body)
	require.EqualValues(t, 2, body["resource_provider_generation"])

	// GET one, GET unknown one.
	st, _, body = call(t, srv, "GET", base+"/DISK_GB", "", "")
	require.Equal(t, 200, st)
	require.EqualValues(t, 10, body["reserved"])
	st, _, _ = call(t, srv, "GET", base+"/MEMORY_MB", "", "")
	require.Equal(t, 404, st)

	// PUT one: stale generation 409, missing inventory 400, unknown class 404.
	st, _, body = call(t, srv, "PUT", base+"/VCPU", "1.23", `{"resource_provider_generation": 0, "total": 16}`)
	require.Equal(t, 409, st)
	_, code, _ = errOf(t, body)
	require.Equal(t, "placement.concurrent_update", code)
	st, _, _ = call(t, srv, "PUT", base+"/MEMORY_MB", "", `{"resource_provider_generation": 2, "total": 16}`)
	require.Equal(t, 400, st)
	st, _, _ = call(t, srv, "PUT", base+"/CUSTOM_X", "", `{"resource_provider_generation": 2, "total": 16}`)
	require.Equal(t, 404, st)
	st, _, body = call(t, srv, "PUT", base+"/VCPU", "", `{"resource_provider_generation": 2, "total": 16, "allocation_ratio": 2.0}`)
	require.Equal(t, 200, st, body)
	require.EqualValues(t, 3, body["resource_provider_generation"])
	require.EqualValues(t, 16, body["total"])
	require.EqualValues(t, 2.0, body["allocation_ratio"])

	// PUT all: replaces.
	st, _, body = call(t, srv, "PUT", base, "", `{"resource_provider_generation": 2, "inventories": {}}`)
	require.Equal(t, 409, st, body)
	st, _, body = call(t, srv, "PUT", base, "", `{"resource_provider_generation": 3, "inventories": {"CUSTOM_NOPE": {"total": 1}}}`)
	require.Equal(t, 400, st)
	_, _, detail = errOf(t, body)
	require.Contains(t, detail, "Unknown resource class in inventory")
	st, _, body = call(t, srv, "PUT", base, "", `{"resource_provider_generation": 3,
		"inventories": {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 1024, "max_unit": 512, "step_size": 256}}}`)
	require.Equal(t, 200, st, body)
	require.EqualValues(t, 4, body["resource_provider_generation"])
	st, _, body = call(t, srv, "GET", base, "", "")
	require.Equal(t, 200, st)
	invs := body["inventories"].(map[string]any)
	require.Len(t, invs, 2)
	require.EqualValues(t, 512, invs["MEMORY_MB"].(map[string]any)["max_unit"])

	// DELETE one: unknown class 404, missing inventory 404, then 204.
	st, _, _ = call(t, srv, "DELETE", base+"/CUSTOM_X", "", "")
	require.Equal(t, 404, st)
	st, _, _ = call(t, srv, "DELETE", base+"/DISK_GB", "", "")
	require.Equal(t, 404, st)
	st, _, _ = call(t, srv, "DELETE", base+"/MEMORY_MB", "", "")
	require.Equal(t, 204, st)

	// DELETE all: 405 before 1.5.
	st, _, _ = call(t, srv, "DELETE", base, "1.4", "")
	require.Equal(t, 405, st)
	st, _, _ = call(t, srv, "DELETE", base, "1.5", "")
	require.Equal(t, 204, st)
	st, _, body = call(t, srv, "GET", base, "", "")
	require.Equal(t, 200, st)
	require.Empty(t, body["inventories"])
	require.EqualValues(t, 6, body["resource_provider_generation"])
}

func TestInventoryInUse(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	srv, pool := invServer(t, Options{Metrics: reg})
	rp := mkProvider(t, pool, "rp1")
	base := "/resource_providers/" + rp + "/inventories"
	st, _, body := call(t, srv, "PUT", base, "", `{"resource_provider_generation": 0,
		"inventories": {"VCPU": {"total": 4}, "DISK_GB": {"total": 100}}}`)
	require.Equal(t, 200, st, body)
	st, _, body = call(t, srv, "PUT", "/allocations/"+uuid.NewString(), "1.12",
		fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 2}}}, "project_id": "p", "user_id": "u"}`, rp))
	require.Equal(t, 204, st, body)

	// Deleting the VCPU inventory (alone, or by PUT all, or DELETE all) is 409.
	st, _, body = call(t, srv, "DELETE", base+"/VCPU", "1.23", "")
	require.Equal(t, 409, st, body)
	st, _, body = call(t, srv, "PUT", base, "1.23", `{"resource_provider_generation": 2, "inventories": {"DISK_GB": {"total": 100}}}`)
	require.Equal(t, 409, st)
	_, code, detail := errOf(t, body)
	require.Equal(t, "placement.inventory.inuse", code)
	require.Contains(t, detail, "'VCPU'")
	st, _, body = call(t, srv, "DELETE", base, "1.23", "")
	require.Equal(t, 409, st)
	_, code, _ = errOf(t, body)
	require.Equal(t, "placement.inventory.inuse", code)

	// Removing the unused one is fine; shrinking below usage is accepted
	// (as Placement 8.0), by one PUT or by PUT all, with a warning: the
	// counter, and OverCapacity lists the provider.
	st, _, body = call(t, srv, "DELETE", base+"/DISK_GB", "", "")
	require.Equal(t, 204, st, body)
	st, _, body = call(t, srv, "PUT", base+"/VCPU", "1.23", `{"resource_provider_generation": 3, "total": 1}`)
	require.Equal(t, 200, st, body)
	require.EqualValues(t, 1, body["total"])
	st, _, body = call(t, srv, "PUT", base, "1.26", `{"resource_provider_generation": 4, "inventories": {"VCPU": {"total": 1, "reserved": 1}}}`)
	require.Equal(t, 200, st, body)
	over, err := OverCapacity(context.Background(), pool)
	require.NoError(t, err)
	require.Len(t, over, 1)
	require.Equal(t, rp, over[0].ProviderUuid.String())
	require.Equal(t, "VCPU", over[0].ResourceClass)
	require.EqualValues(t, 2, over[0].Used)
	require.EqualValues(t, 0, over[0].Capacity)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP metalloc_placement_inventory_over_capacity_total Inventory writes accepted although the provider's allocations of the class use more than its new capacity, by resource class.
# TYPE metalloc_placement_inventory_over_capacity_total counter
metalloc_placement_inventory_over_capacity_total{resource_class="VCPU"} 2
`)))
	// New allocations are still held to capacity.
	st, _, body = call(t, srv, "PUT", "/allocations/"+uuid.NewString(), "1.12",
		fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u"}`, rp))
	require.Equal(t, 409, st, body)
}

// Inventory values no allocation could use are refused with 400.
func TestInventoryUnitRules(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	_, _, body := call(t, srv, "POST", "/resource_providers", "1.20", `{"name": "units"}`)
	base := "/resource_providers/" + body["uuid"].(string) + "/inventories"
	for _, bad := range []string{
		`{"resource_class": "VCPU", "total": 4, "min_unit": 3, "max_unit": 2}`,
		`{"resource_class": "VCPU", "total": 4, "allocation_ratio": 0}`,
	} {
		st, _, body := call(t, srv, "POST", base, "", bad)
		require.Equal(t, 400, st, "%s: %v", bad, body)
	}
	st, _, body := call(t, srv, "POST", base, "", `{"resource_class": "VCPU", "total": 4}`)
	require.Equal(t, 201, st, body)
	require.EqualValues(t, 2147483647, body["max_unit"], "an omitted max_unit defaults as in Placement")
	// An explicit max_unit above total is accepted, as Placement does.
	st, _, body = call(t, srv, "POST", base, "", `{"resource_class": "MEMORY_MB", "total": 4, "max_unit": 5}`)
	require.Equal(t, 201, st, body)
}

// TestInventoryPutWhatGetReturned: a PUT of exactly what GET returned is
// accepted, max_unit 2147483647 of an inventory written without one
// included (what `openstack resource provider inventory set --amend`
// does: GET, change a class, PUT all back).
func TestInventoryPutWhatGetReturned(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	rp := mkProvider(t, pool, "amend")
	base := "/resource_providers/" + rp + "/inventories"
	st, _, body := call(t, srv, "PUT", base, "1.39",
		`{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 16}, "MEMORY_MB": {"total": 1024, "max_unit": 512}}}`)
	require.Equal(t, 200, st, body)
	st, _, got := call(t, srv, "GET", base, "1.39", "")
	require.Equal(t, 200, st)
	require.EqualValues(t, 2147483647, got["inventories"].(map[string]any)["VCPU"].(map[string]any)["max_unit"])
	invs := got["inventories"].(map[string]any)
	invs["DISK_GB"] = map[string]any{"total": 100}
	b, err := json.Marshal(got)
	require.NoError(t, err)
	st, _, body = call(t, srv, "PUT", base, "1.39", string(b))
	require.Equal(t, 200, st, body)
	require.Len(t, body["inventories"], 3)
	// One class alone, as GET shows it.
	st, _, one := call(t, srv, "GET", base+"/VCPU", "1.39", "")
	require.Equal(t, 200, st)
	b, err = json.Marshal(one)
	require.NoError(t, err)
	st, _, body = call(t, srv, "PUT", base+"/VCPU", "1.39", string(b))
	require.Equal(t, 200, st, body)
	require.EqualValues(t, 2147483647, body["max_unit"])
}

// TestInventoriesEmptyCacheHeaders: from 1.15 an empty inventory list has
// cache-control but, as in Placement, no last-modified.
func TestInventoriesEmptyCacheHeaders(t *testing.T) {
	t.Parallel()
	srv, pool := invServer(t)
	rp := mkProvider(t, pool, "empty")
	st, h, _ := call(t, srv, "GET", "/resource_providers/"+rp+"/inventories", "1.15", "")
	require.Equal(t, 200, st)
	require.Equal(t, "no-cache", h.Get("Cache-Control"))
	require.Empty(t, h.Get("Last-Modified"))
	st, h, _ = call(t, srv, "PUT", "/resource_providers/"+rp+"/inventories", "1.15",
		`{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 2}}}`)
	require.Equal(t, 200, st)
	require.NotEmpty(t, h.Get("Last-Modified"))
	// A NotFound Placement lets escape: no Vary.
	st, h, _ = call(t, srv, "DELETE", "/resource_providers/"+uuid.NewString()+"/inventories", "1.15", "")
	require.Equal(t, 404, st)
	require.Empty(t, h.Values("Vary"))
}

// TestPyFloat: allocation_ratio is written as Placement (Python's json)
// writes a float.
func TestPyFloat(t *testing.T) {
	t.Parallel()
	for x, want := range map[float64]string{1: "1.0", 1.5: "1.5", 16: "16.0", 0.0001: "0.0001", 0.00001: "1e-05",
		1e15: "1000000000000000.0", 1e16: "1e+16", 123456789012345.6: "123456789012345.6", 3.40282e+38: "3.40282e+38",
		0.1: "0.1", 2.5e-7: "2.5e-07", 0: "0.0"} {
		b, err := json.Marshal(pyFloat(x))
		require.NoError(t, err)
		require.Equal(t, want, string(b), x)
	}
}
