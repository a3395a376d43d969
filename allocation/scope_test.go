package allocation

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/auth/policy"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

// Projects and callers of the access tests.
const (
	projectA = "a0000000000000000000000000000000"
	projectB = "b0000000000000000000000000000000"
)

var scopedCallers = map[string]auth.Credentials{
	"system-admin": {UserID: "sa", Roles: []string{"admin", "member", "reader"}, SystemScope: "all"},
	"a-member":     {UserID: "am", ProjectID: projectA, Roles: []string{"member", "reader"}},
}

// setupScoped serves the allocation API with Ironic's default access rules
// (scope and new defaults enforced), callers picked by
// webtest.CallerHeader.
func setupScoped(t *testing.T) (*fixture, func(caller, method, path, body string) (int, map[string]any)) {
	t.Helper()
	f := setup(t)
	enf, err := policy.New(policy.IronicDefaults(), policy.Options{EnforceScope: true, EnforceNewDefaults: true})
	require.NoError(t, err)
	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	e.Use(web.RequestID(zaptest.NewLogger(t)), webtest.Callers(scopedCallers))
	NewHandler(NewStore(f.pool), HandlerOptions{Rules: auth.Rules{Authorizer: enf, EnforceNewDefaults: true}}).
		Register(e.Group("/v1", web.IronicVersion()))
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return f, func(caller, method, path, body string) (int, map[string]any) {
		t.Helper()
		st, out, _ := webtest.DoJSON(t, method, srv.URL+path,
			map[string]string{web.IronicVersionHeader: "1.82", webtest.CallerHeader: caller}, body)
		return st, out
	}
}

// A project member may name in candidate_nodes only nodes its project owns
// or leases, as Ironic filters check_node_list by the caller's project:
// another project's node, by name or uuid, is "Nodes cannot be found"
// (400) as one that does not exist, and its uuid is not disclosed. A
// system member (baremetal:allocation:create_restricted) names any node.
func TestCandidateNodesLimitedToTheCallersProject(t *testing.T) {
	t.Parallel()
	f, call := setupScoped(t)
	a, b := projectA, projectB
	_, mine := dbtest.Node(t, f.pool, dbtest.NodeSpec{Name: "mine", Owner: &a})
	_, leased := dbtest.Node(t, f.pool, dbtest.NodeSpec{Name: "leased", Owner: &b, Lessee: &a})
	_, theirs := dbtest.Node(t, f.pool, dbtest.NodeSpec{Name: "theirs", Owner: &b})

	for _, ident := range []string{"theirs", theirs.String()} {
		st, body := call("a-member", "POST", "/v1/allocations",
			`{"resource_class": "gold", "candidate_nodes": ["mine", "`+ident+`"]}`)
		require.Equal(t, http.StatusBadRequest, st, body)
		require.Equal(t, "Nodes cannot be found: "+ident, webtest.IronicFault(t, body))
		if ident == "theirs" {
			raw, _ := json.Marshal(body)
			require.NotContains(t, string(raw), theirs.String(), "another project's node uuid disclosed")
		}
	}
	require.Zero(t, dbtest.Count(t, f.pool, `SELECT count(*) FROM allocations`), "nothing stored")

	st, body := call("a-member", "POST", "/v1/allocations",
		`{"resource_class": "gold", "candidate_nodes": ["mine", "leased"]}`)
	require.Equal(t, http.StatusCreated, st, body)
	require.Equal(t, []any{mine.String(), leased.String()}, body["candidate_nodes"])
	require.Equal(t, projectA, body["owner"])

	st, body = call("system-admin", "POST", "/v1/allocations",
		`{"resource_class": "gold", "candidate_nodes": ["theirs"], "owner": "`+projectA+`"}`)
	require.Equal(t, http.StatusCreated, st, body)
	require.Equal(t, []any{theirs.String()}, body["candidate_nodes"])
}

// A uuid another project's allocation has is Ironic's AllocationAlreadyExists
// (409 "An allocation with UUID <uuid> already exists.") in every state of
// that allocation, whether the POST is batched, has candidate nodes or
// backfills: never "already associated" naming the node it holds, which the
// caller may not see. A uuid that only another project's node holds as its
// instance is a 409 naming no node; a caller who may see that node gets it
// named.
func TestAllocationUUIDOfAnotherProject(t *testing.T) {
	t.Parallel()
	f, call := setupScoped(t)
	a, b := projectA, projectB
	dbtest.Node(t, f.pool, dbtest.NodeSpec{Name: "mine", Owner: &a})
	dbtest.Node(t, f.pool, dbtest.NodeSpec{Name: "mine-deployed", Owner: &a, ProvisionState: "active"})
	_, theirs := dbtest.Node(t, f.pool, dbtest.NodeSpec{Name: "theirs", Owner: &b})

	theirAlloc := func() string {
		t.Helper()
		st, body := call("system-admin", "POST", "/v1/allocations", `{"resource_class": "gold", "owner": "`+b+`"}`)
		require.Equal(t, http.StatusCreated, st, body)
		return body["uuid"].(string)
	}
	refused := func(state, taken string) {
		t.Helper()
		stored := dbtest.Count(t, f.pool, `SELECT count(*) FROM allocations`)
		for kind, req := range map[string]string{
			"batched":    `{"resource_class": "gold", "uuid": "` + taken + `"}`,
			"candidates": `{"resource_class": "gold", "uuid": "` + taken + `", "candidate_nodes": ["mine"]}`,
			"backfill":   `{"resource_class": "gold", "uuid": "` + taken + `", "node": "mine-deployed"}`,
		} {
			st, body := call("a-member", "POST", "/v1/allocations", req)
			require.Equal(t, http.StatusConflict, st, "%s %s: %v", state, kind, body)
			require.Equal(t, "An allocation with UUID "+taken+" already exists.", webtest.IronicFault(t, body), state+" "+kind)
			raw, _ := json.Marshal(body)
			require.NotContains(t, string(raw), theirs.String(), state+" "+kind)
			require.NotContains(t, string(raw), "theirs", state+" "+kind)
		}
		require.Equal(t, stored, dbtest.Count(t, f.pool, `SELECT count(*) FROM allocations`), state+": nothing stored")
	}
	active := theirAlloc()
	refused("allocating", active)
	f.reserveAll(f.conductor("c1"))
	v, err := NewStore(f.pool).Get(context.Background(), active)
	require.NoError(t, err)
	require.Equal(t, StateActive, v.State)
	require.Equal(t, theirs, *v.NodeUUID, "active on their node")
	refused("active", active)
	failed := theirAlloc() // no free node left: it stays allocating
	_, err = f.pool.Exec(context.Background(), `UPDATE allocations SET state = 'error', last_error = 'x' WHERE uuid = $1`, failed)
	require.NoError(t, err)
	refused("error", failed)

	// Their node holds an instance uuid of its own (a node PATCH).
	inst := uuid.New().String()
	_, holder := dbtest.Node(t, f.pool, dbtest.NodeSpec{Name: "theirs-too", Owner: &b})
	_, err = f.pool.Exec(context.Background(), `UPDATE nodes SET instance_uuid = $1 WHERE uuid = $2`, inst, holder)
	require.NoError(t, err)
	st, body := call("a-member", "POST", "/v1/allocations", `{"resource_class": "gold", "uuid": "`+inst+`"}`)
	require.Equal(t, http.StatusConflict, st, body)
	require.Equal(t, "Instance "+inst+" is already associated with a node.", webtest.IronicFault(t, body))
	raw, _ := json.Marshal(body)
	require.NotContains(t, string(raw), holder.String())
	st, body = call("system-admin", "POST", "/v1/allocations", `{"resource_class": "gold", "uuid": "`+inst+`"}`)
	require.Equal(t, http.StatusConflict, st, body)
	require.Equal(t, "Instance "+inst+" is already associated with a node, it cannot be associated with this other node "+holder.String(),
		webtest.IronicFault(t, body))
}
