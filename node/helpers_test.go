package node_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web/ironictest"
	"github.com/metalloc/metalloc/web/webtest"
)

// fakeRemover is the AllocationRemover of the tests: the real deallocation
// (node.Deallocator), counting its calls.
type fakeRemover struct{ calls atomic.Int32 }

func (f *fakeRemover) RemoveNodeAllocation(ctx context.Context, tx pgx.Tx, nodeID, allocationID int64) error {
	f.calls.Add(1)
	return node.Deallocator{}.RemoveNodeAllocation(ctx, tx, nodeID, allocationID)
}

// env is one test's system under test: a fresh database, the store, and an
// HTTP server with the real handlers behind metalloc's Ironic middleware.
type env struct {
	t       *testing.T
	pool    *pgxpool.Pool
	store   *node.Store
	srv     *ironictest.Ironic
	remover *fakeRemover
}

func setup(t *testing.T) *env {
	t.Helper()
	pool := dbtest.New(t)
	store := node.NewStore(pool)
	rem := &fakeRemover{}
	srv := ironictest.NewIronic(t, node.NewHandler(store, rem, node.HandlerOptions{PublicEndpoint: ironictest.Base, MaxLimit: 100}).Register)
	return &env{t: t, pool: pool, store: store, srv: srv, remover: rem}
}

// sub returns e for subtest t (failures and request contexts belong to t).
func (e *env) sub(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// response is a decoded HTTP response.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// fault returns the faultstring of an Ironic error body.
func (r response) fault(t *testing.T) string {
	t.Helper()
	return webtest.IronicFault(t, r.body)
}

// do sends a request at microversion version ("" = no header) with body
// (nil, a string sent as is, or a value encoded as JSON).
func (e *env) do(method, path, version string, body any) response {
	e.t.Helper()
	r := e.srv.With(e.t).Do(method, path, version, body)
	return response{status: r.Status, header: r.Header, raw: r.Raw, body: r.Body}
}

// must sends a request and requires the status.
func (e *env) must(status int, method, path, version string, body any) response {
	e.t.Helper()
	r := e.do(method, path, version, body)
	require.Equal(e.t, status, r.status, "%s %s: %s", method, path, r.raw)
	return r
}

// createNode creates a node through the API at 1.82 and returns its body.
func (e *env) createNode(fields map[string]any) map[string]any {
	e.t.Helper()
	if _, ok := fields["driver"]; !ok {
		fields["driver"] = "fake-hardware"
	}
	return e.must(http.StatusCreated, http.MethodPost, "/v1/nodes", "1.82", fields).body
}

// availableNode creates a node and drives it to available with power off.
func (e *env) availableNode(fields map[string]any) string {
	e.t.Helper()
	id := e.createNode(fields)["uuid"].(string)
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/states/provision", "1.82", map[string]any{"target": "manage"})
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/states/power", "1.82", map[string]any{"target": "power off"})
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/states/provision", "1.82", map[string]any{"target": "provide"})
	return id
}

// activeNode returns an available node deployed to active.
func (e *env) activeNode(fields map[string]any) string {
	e.t.Helper()
	id := e.availableNode(fields)
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+id+"/states/provision", "1.82", map[string]any{"target": "active"})
	return id
}

// allocate links a new active allocation to the node, as a conductor does
// (both sides in one transaction), and returns the allocation uuid.
func (e *env) allocate(nodeUUID string) uuid.UUID {
	e.t.Helper()
	ctx := e.t.Context()
	au := uuid.New()
	tx, err := e.pool.Begin(ctx)
	require.NoError(e.t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var nodeID, allocID int64
	require.NoError(e.t, tx.QueryRow(ctx, `SELECT id FROM nodes WHERE uuid = $1`, nodeUUID).Scan(&nodeID))
	require.NoError(e.t, tx.QueryRow(ctx,
		`INSERT INTO allocations (uuid, resource_class, state, node_id) VALUES ($1, 'baremetal', 'active', $2) RETURNING id`,
		au, nodeID).Scan(&allocID))
	_, err = tx.Exec(ctx, `UPDATE nodes SET allocation_id = $1, instance_uuid = $2 WHERE id = $3`, allocID, au, nodeID)
	require.NoError(e.t, err)
	require.NoError(e.t, tx.Commit(ctx))
	return au
}

// allocationExists reports whether the allocation row is still there.
func (e *env) allocationExists(au uuid.UUID) bool {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(e.t.Context(), `SELECT count(*) FROM allocations WHERE uuid = $1`, au).Scan(&n))
	return n == 1
}

// getNode fetches a node at 1.82.
func (e *env) getNode(ident string) map[string]any {
	e.t.Helper()
	return e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+ident, "1.82", nil).body
}
