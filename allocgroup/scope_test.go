package allocgroup_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/allocgroup"
	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/auth/policy"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

// A project member's group may name in candidate_nodes only nodes its
// project owns or leases, as an allocation's (Ironic's check_node_list
// with the caller's project): another project's node is "Nodes cannot be
// found" (400), its uuid undisclosed; a system member names any node.
func TestGroupCandidateNodesLimitedToTheCallersProject(t *testing.T) {
	t.Parallel()
	const projectA, projectB = "a0000000000000000000000000000000", "b0000000000000000000000000000000"
	pool := dbtest.New(t)
	a, b := projectA, projectB
	_, mine := dbtest.Node(t, pool, dbtest.NodeSpec{Name: "mine", Owner: &a})
	_, theirs := dbtest.Node(t, pool, dbtest.NodeSpec{Name: "theirs", Owner: &b})
	enf, err := policy.New(policy.IronicDefaults(), policy.Options{EnforceScope: true, EnforceNewDefaults: true})
	require.NoError(t, err)
	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	e.Use(webtest.Callers(map[string]auth.Credentials{
		"system-admin": {UserID: "sa", Roles: []string{"admin", "member", "reader"}, SystemScope: "all"},
		"a-member":     {UserID: "am", ProjectID: projectA, Roles: []string{"member", "reader"}},
	}))
	allocgroup.NewHandler(pool, allocgroup.HandlerOptions{Rules: auth.Rules{Authorizer: enf, EnforceNewDefaults: true}}).
		Register(e.Group("/v1", web.IronicVersion()))
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	post := func(caller, body string) (int, map[string]any, string) {
		return webtest.DoJSON(t, "POST", srv.URL+"/v1/allocation_groups",
			map[string]string{web.IronicVersionHeader: "1.82", webtest.CallerHeader: caller}, body)
	}

	st, body, raw := post("a-member", `{"count": 1, "resource_class": "gold", "candidate_nodes": ["mine", "theirs"]}`)
	require.Equal(t, http.StatusBadRequest, st, raw)
	require.Equal(t, "Nodes cannot be found: theirs", webtest.IronicFault(t, body))
	require.NotContains(t, raw, theirs.String())
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_groups`), "nothing stored")

	st, body, raw = post("a-member", `{"count": 1, "resource_class": "gold", "candidate_nodes": ["mine"]}`)
	require.Equal(t, http.StatusCreated, st, raw)
	require.Equal(t, []any{mine.String()}, body["candidate_nodes"])

	st, body, raw = post("system-admin", `{"count": 1, "resource_class": "gold", "candidate_nodes": ["theirs"]}`)
	require.Equal(t, http.StatusCreated, st, raw)
	require.Equal(t, []any{theirs.String()}, body["candidate_nodes"])
}
