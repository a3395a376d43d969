package placement

import (
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
)

// rpTestServer is testServer that also returns its pool, for tests that
// set up rows the API under test does not write (inventories, allocations).
func rpTestServer(t *testing.T) (*httptest.Server, *pgxpool.Pool) {
	t.Helper()
	pool := dbtest.New(t)
	require.NoError(t, Prepare(t.Context(), pool))
	e := echo.New()
	e.HTTPErrorHandler = web.PlacementErrorHandler
	e.JSONSerializer = web.JSONSerializer{}
	e.Use(web.RequestID(zaptest.NewLogger(t)))
	NewHandler(pool, Options{}).Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv, pool
}

func TestResourceClasses(t *testing.T) {
	t.Parallel()
	srv, pool := rpTestServer(t)

	// Not before 1.2.
	status, _, _ := call(t, srv, "GET", "/resource_classes", "1.1", "")
	require.Equal(t, 404, status)

	status, h, body := call(t, srv, "GET", "/resource_classes", "1.2", "")
	require.Equal(t, 200, status)
	rcs := body["resource_classes"].([]any)
	require.Len(t, rcs, 21)
	require.Equal(t, "VCPU", rcs[0].(map[string]any)["name"])
	require.Empty(t, h.Get("Last-Modified"))
	_, h, _ = call(t, srv, "GET", "/resource_classes", "1.15", "")
	require.NotEmpty(t, h.Get("Last-Modified"))

	// Create.
	status, h, body = call(t, srv, "POST", "/resource_classes", "1.2", `{"name": "CUSTOM_GOLD"}`)
	require.Equal(t, 201, status, "%v", body)
	require.Equal(t, srv.URL+"/resource_classes/CUSTOM_GOLD", h.Get("Location"))
	status, _, body = call(t, srv, "POST", "/resource_classes", "1.2", `{"name": "CUSTOM_GOLD"}`)
	require.Equal(t, 409, status)
	require.Contains(t, rpErrDetail(t, body), "Conflicting resource class already exists: CUSTOM_GOLD")
	for _, b := range []string{`{"name": "GOLD"}`, `{"name": "CUSTOM_gold"}`, `{}`, `{"name": "CUSTOM_X", "x": 1}`} {
		status, _, body = call(t, srv, "POST", "/resource_classes", "1.2", b)
		require.Equal(t, 400, status, b)
		require.Contains(t, rpErrDetail(t, body), "JSON does not validate")
	}
	var id int32
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT id FROM placement.resource_classes WHERE name = 'CUSTOM_GOLD'").Scan(&id))
	require.GreaterOrEqual(t, id, int32(10000))

	// Get.
	status, _, body = call(t, srv, "GET", "/resource_classes/CUSTOM_GOLD", "1.2", "")
	require.Equal(t, 200, status)
	require.Equal(t, "CUSTOM_GOLD", body["name"])
	require.Equal(t, "/resource_classes/CUSTOM_GOLD", body["links"].([]any)[0].(map[string]any)["href"])
	status, _, body = call(t, srv, "GET", "/resource_classes/CUSTOM_NOPE", "1.2", "")
	require.Equal(t, 404, status)
	require.Contains(t, rpErrDetail(t, body), "No such resource class CUSTOM_NOPE")

	// PUT 1.2-1.6 renames.
	status, _, body = call(t, srv, "PUT", "/resource_classes/CUSTOM_GOLD", "1.6", `{"name": "CUSTOM_SILVER"}`)
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, "CUSTOM_SILVER", body["name"])
	status, _, _ = call(t, srv, "POST", "/resource_classes", "1.2", `{"name": "CUSTOM_GOLD"}`)
	require.Equal(t, 201, status)
	status, _, body = call(t, srv, "PUT", "/resource_classes/CUSTOM_GOLD", "1.6", `{"name": "CUSTOM_SILVER"}`)
	require.Equal(t, 409, status)
	require.Contains(t, rpErrDetail(t, body), "already exists")
	status, _, _ = call(t, srv, "PUT", "/resource_classes/VCPU", "1.6", `{"name": "CUSTOM_VCPU"}`)
	require.Equal(t, 400, status)
	status, _, _ = call(t, srv, "PUT", "/resource_classes/CUSTOM_NOPE", "1.6", `{"name": "CUSTOM_X"}`)
	require.Equal(t, 404, status)

	// PUT 1.7+ creates or confirms.
	status, h, _ = call(t, srv, "PUT", "/resource_classes/CUSTOM_BRONZE", "1.7", "")
	require.Equal(t, 201, status)
	require.Equal(t, srv.URL+"/resource_classes/CUSTOM_BRONZE", h.Get("Location"))
	status, _, _ = call(t, srv, "PUT", "/resource_classes/CUSTOM_BRONZE", "1.7", "")
	require.Equal(t, 204, status)
	status, _, _ = call(t, srv, "PUT", "/resource_classes/VCPU", "1.7", "")
	require.Equal(t, 400, status)

	// Delete.
	status, _, _ = call(t, srv, "DELETE", "/resource_classes/VCPU", "1.2", "")
	require.Equal(t, 400, status)
	status, _, _ = call(t, srv, "DELETE", "/resource_classes/CUSTOM_NOPE", "1.2", "")
	require.Equal(t, 404, status)
	rpCreate(t, srv, "p", rpU1, "")
	_, err := pool.Exec(t.Context(), `INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit)
		SELECT rp.id, rc.id, 4, 4 FROM placement.resource_providers rp, placement.resource_classes rc
		 WHERE rp.uuid = $1 AND rc.name = 'CUSTOM_BRONZE'`, rpU1)
	require.NoError(t, err)
	status, _, body = call(t, srv, "DELETE", "/resource_classes/CUSTOM_BRONZE", "1.2", "")
	require.Equal(t, 409, status)
	require.Contains(t, rpErrDetail(t, body), "in use in inventory")
	status, _, _ = call(t, srv, "DELETE", "/resource_classes/CUSTOM_SILVER", "1.2", "")
	require.Equal(t, 204, status)
	status, _, _ = call(t, srv, "GET", "/resource_classes/CUSTOM_SILVER", "1.2", "")
	require.Equal(t, 404, status)
}

func TestProviderListResourcesAndInUse(t *testing.T) {
	t.Parallel()
	srv, pool := rpTestServer(t)
	rpCreate(t, srv, "small", rpU1, "")
	rpCreate(t, srv, "big", rpU2, "")
	rpCreate(t, srv, "none", rpU3, "")
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(t.Context(), sql, args...)
		require.NoError(t, err)
	}
	inv := `INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, reserved, max_unit, step_size, allocation_ratio)
		SELECT id, $2, $3, $4, $5, $6, $7 FROM placement.resource_providers WHERE uuid = $1`
	exec(inv, rpU1, 0, 4, 0, 4, 1, 1.0)         // VCPU 4
	exec(inv, rpU2, 0, 8, 2, 8, 1, 2.0)         // VCPU (8-2)*2 = 12, max_unit 8
	exec(inv, rpU2, 1, 1024, 0, 1024, 256, 1.0) // MEMORY_MB step 256
	names := func(query string) []string {
		t.Helper()
		status, _, body := call(t, srv, "GET", "/resource_providers?resources="+query, "1.4", "")
		require.Equal(t, 200, status, "%s %v", query, body)
		var out []string
		for _, p := range body["resource_providers"].([]any) {
			out = append(out, p.(map[string]any)["name"].(string))
		}
		return out
	}
	require.Equal(t, []string{"small", "big"}, names("VCPU:4"))
	require.Equal(t, []string{"big"}, names("VCPU:5"))
	require.Empty(t, names("VCPU:9")) // above max_unit
	require.Equal(t, []string{"big"}, names("VCPU:2,MEMORY_MB:512"))
	require.Empty(t, names("MEMORY_MB:100")) // not a step
	// Usage counts against capacity.
	exec(`INSERT INTO placement.consumers (uuid, project_id, user_id) VALUES ('55555555-5555-5555-5555-555555555555', 'p', 'u')`)
	exec(`INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
		SELECT rp.id, c.id, 0, 2 FROM placement.resource_providers rp, placement.consumers c WHERE rp.uuid = $1`, rpU1)
	require.Equal(t, []string{"big"}, names("VCPU:4"))
	require.Equal(t, []string{"big"}, names("VCPU:3"))
	require.Equal(t, []string{"small", "big"}, names("VCPU:2"))

	// A provider with allocations cannot go.
	status, _, body := call(t, srv, "DELETE", "/resource_providers/"+rpU1, "1.23", "")
	require.Equal(t, 409, status)
	require.Equal(t, "placement.resource_provider.inuse", rpErrCode(t, body))
	// One with inventory, traits and aggregates can.
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU2+"/aggregates", "1.1", `["aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"]`)
	require.Equal(t, 200, status)
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU2+"/traits", "1.6",
		`{"traits": ["HW_CPU_X86_AVX"], "resource_provider_generation": 0}`)
	require.Equal(t, 200, status)
	status, _, _ = call(t, srv, "DELETE", "/resource_providers/"+rpU2, "1.23", "")
	require.Equal(t, 204, status)
}

// TestResourceClassNotFoundNoVary: the class's NotFound escapes
// Placement's handlers, so the 404 has the version header but no Vary.
func TestResourceClassNotFoundNoVary(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	st, h, _ := call(t, srv, "GET", "/resource_classes/CUSTOM_NOPE", "1.2", "")
	require.Equal(t, 404, st)
	require.Equal(t, "placement 1.2", h.Get("OpenStack-API-Version"))
	require.Empty(t, h.Values("Vary"))
}

// TestAllocationsLeaveTheClassUnlocked: writing an allocation locks no row
// of placement.resource_classes (migration 00036: concurrent claims of one
// class used to share that row's key lock, a MultiXact per claim), and a
// class in use by allocations still cannot be deleted, since its inventory
// cannot be.
func TestAllocationsLeaveTheClassUnlocked(t *testing.T) {
	t.Parallel()
	srv, pool := rpTestServer(t)
	ctx := t.Context()
	status, _, body := call(t, srv, "POST", "/resource_classes", "1.2", `{"name": "CUSTOM_GOLD"}`)
	require.Equal(t, 201, status, "%v", body)
	rpCreate(t, srv, "p", rpU1, "")
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU1+"/inventories", "1.2",
		`{"resource_provider_generation": 0, "inventories": {"CUSTOM_GOLD": {"total": 2}}}`)
	require.Equal(t, 200, status, "%v", body)

	// An allocation written and not yet committed, as a claim or PUT
	// /allocations/{consumer} writes it.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `WITH c AS (
			INSERT INTO placement.consumers (uuid, project_id, user_id, generation)
			VALUES (gen_random_uuid(), 'p', 'u', 1) RETURNING id)
		INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
		SELECT rp.id, c.id, rc.id, 1 FROM c, placement.resource_providers rp, placement.resource_classes rc
		 WHERE rp.uuid = $1 AND rc.name = 'CUSTOM_GOLD'`, rpU1)
	require.NoError(t, err)
	other, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer other.Rollback(ctx)
	_, err = other.Exec(ctx, `SELECT 1 FROM placement.resource_classes WHERE name = 'CUSTOM_GOLD' FOR UPDATE NOWAIT`)
	require.NoError(t, err, "the class's row is not locked by the allocation")
	require.NoError(t, other.Rollback(ctx))
	require.NoError(t, tx.Commit(ctx))

	status, _, body = call(t, srv, "DELETE", "/resource_classes/CUSTOM_GOLD", "1.2", "")
	require.Equal(t, 409, status, "%v", body)
	require.Contains(t, rpErrDetail(t, body), "in use in inventory")
	status, _, _ = call(t, srv, "DELETE", "/resource_providers/"+rpU1+"/inventories/CUSTOM_GOLD", "1.2", "")
	require.Equal(t, 409, status, "an inventory with allocations stays")
}
