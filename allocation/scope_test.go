package allocation

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

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
