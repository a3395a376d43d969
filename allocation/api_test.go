package allocation

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

type apiFixture struct {
	*fixture
	srv *httptest.Server
}

func setupAPI(t *testing.T) *apiFixture {
	t.Helper()
	f := setup(t)
	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	e.Use(web.RequestID(zaptest.NewLogger(t)))
	NewHandler(NewStore(f.pool), HandlerOptions{}).Register(e.Group("/v1", web.IronicVersion()))
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &apiFixture{fixture: f, srv: srv}
}

// call sends a request at microversion ver and returns status and decoded body.
func (a *apiFixture) call(method, path, ver string, body any) (int, map[string]any, http.Header) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		s, ok := body.(string)
		if !ok {
			b, _ := json.Marshal(body)
			s = string(b)
		}
		rd = strings.NewReader(s)
	}
	req, _ := http.NewRequest(method, a.srv.URL+path, rd)
	if ver != "" {
		req.Header.Set(web.IronicVersionHeader, ver)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		require.NoError(a.t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp.StatusCode, out, resp.Header
}

// fault extracts Ironic's faultstring from an error body.
func fault(t *testing.T, body map[string]any) string {
	t.Helper()
	var inner struct{ Faultstring, Faultcode string }
	require.NoError(t, json.Unmarshal([]byte(body["error_message"].(string)), &inner))
	return inner.Faultstring
}

func TestAPIVersionGates(t *testing.T) {
	t.Parallel()
	a := setupAPI(t)
	st, body, _ := a.call("GET", "/v1/allocations", "", nil)
	require.Equal(t, 404, st)
	require.Equal(t, "The API version does not allow allocations", fault(t, body))
	st, _, _ = a.call("POST", "/v1/allocations", "1.51", map[string]any{"resource_class": "x"})
	require.Equal(t, 405, st)
	st, body, h := a.call("GET", "/v1/allocations", "1.83", nil)
	require.Equal(t, 406, st)
	require.Contains(t, fault(t, body), "The supported version range is: [1.1, 1.82]")
	require.Equal(t, "1.82", h.Get(web.IronicMaxVersionHeader))
	st, _, h = a.call("GET", "/v1/allocations", "latest", nil)
	require.Equal(t, 200, st)
	require.Equal(t, "1.82", h.Get(web.IronicVersionHeader))
	require.NotEmpty(t, h.Get(web.RequestIDHeader))
	st, _, _ = a.call("GET", "/v1/allocations", "bogus", nil)
	require.Equal(t, 406, st)
}

func TestAPICreateValidation(t *testing.T) {
	t.Parallel()
	a := setupAPI(t)
	n := a.node("n1", "gold")
	var instance uuid.UUID
	require.NoError(t, a.pool.QueryRow(context.Background(),
		`UPDATE nodes SET instance_uuid = gen_random_uuid() WHERE id = $1 RETURNING instance_uuid`, n).Scan(&instance))
	cases := []struct {
		name, ver string
		body      any
		status    int
		msg       string
	}{
		{"no resource class", "1.60", map[string]any{}, 400, "The resource_class field is mandatory when not backfilling"},
		{"unknown field", "1.60", map[string]any{"resource_class": "x", "state": "active"}, 400, "Schema error for allocation"},
		{"long resource class", "1.60", map[string]any{"resource_class": strings.Repeat("x", 81)}, 400, "Schema error for allocation"},
		{"bad trait", "1.60", map[string]any{"resource_class": "x", "traits": []string{"FOO"}}, 400,
			"Schema error for allocation: 'FOO' is not valid under any of the given schemas. Possible root cause: 'FOO' does not match '^CUSTOM_[A-Z0-9_]+$'"},
		{"long resource class worded", "1.60", map[string]any{"resource_class": strings.Repeat("x", 81)}, 400, "Schema error for allocation: '" + strings.Repeat("x", 81) + "' is too long"},
		{"bad name", "1.60", map[string]any{"resource_class": "x", "name": "a b"}, 400, "Cannot create allocation with invalid name 'a b'"},
		{"bad uuid", "1.60", map[string]any{"resource_class": "x", "uuid": "zzz"}, 400, "Expected UUID for uuid: zzz"},
		{"owner too early", "1.59", map[string]any{"resource_class": "x", "owner": "p"}, 406, "Request not acceptable."},
		{"node too early", "1.57", map[string]any{"resource_class": "x", "node": "n1"}, 400, "Cannot set node when creating an allocation in this API version"},
		{"unknown candidate", "1.60", map[string]any{"resource_class": "x", "candidate_nodes": []string{"n1", "nope"}}, 400, "Nodes cannot be found: nope"},
		{"uuid is an instance", "1.60", map[string]any{"resource_class": "x", "uuid": instance.String()}, 409, "is already associated with a node"},
		{"not json", "1.60", "{", 400, "Invalid JSON"},
		{"array body", "1.60", "[]", 400, "Schema error for allocation"},
	}
	for _, c := range cases {
		st, body, _ := a.call("POST", "/v1/allocations", c.ver, c.body)
		require.Equal(t, c.status, st, c.name)
		require.Contains(t, fault(t, body), c.msg, c.name)
	}
	var count int
	require.NoError(t, a.pool.QueryRow(context.Background(), `SELECT count(*) FROM allocations`).Scan(&count))
	require.Zero(t, count, "rejected requests must leave nothing behind")
}

// TestAPIUnknownCandidatesEchoCapped: unknown candidate_nodes are named in
// the 400 up to web.MaxEchoed of them, then counted: 10,000 unknown names
// get a short answer, not one echoing them all.
func TestAPIUnknownCandidatesEchoCapped(t *testing.T) {
	t.Parallel()
	a := setupAPI(t)
	a.node("n1", "gold")
	names := []string{"n1"}
	for i := range 10000 {
		names = append(names, fmt.Sprintf("nope-%05d", i))
	}
	st, body, _ := a.call("POST", "/v1/allocations", "1.60", map[string]any{"resource_class": "gold", "candidate_nodes": names})
	require.Equal(t, 400, st)
	require.Equal(t, "Nodes cannot be found: "+strings.Join(names[1:11], ", ")+" and 9990 more", fault(t, body))
	raw, _ := json.Marshal(body)
	require.Less(t, len(raw), 500)
	st, body, _ = a.call("POST", "/v1/allocations", "1.60", map[string]any{"resource_class": "gold", "candidate_nodes": names[:11]})
	require.Equal(t, 400, st)
	require.Equal(t, "Nodes cannot be found: "+strings.Join(names[1:11], ", "), fault(t, body), "ten are all named")
}

func TestAPICreateGetListPatchDelete(t *testing.T) {
	t.Parallel()
	a := setupAPI(t)
	n1 := a.node("n1", "gold", "CUSTOM_A")
	// An allocation with an owner only gets nodes owned by or leased to it.
	_, err := a.pool.Exec(context.Background(), `UPDATE nodes SET lessee = 'proj' WHERE id = $1`, n1)
	require.NoError(t, err)
	st, body, h := a.call("POST", "/v1/allocations", "1.82", map[string]any{
		"resource_class": "gold", "name": "alloc-1", "traits": []string{"CUSTOM_A"},
		"candidate_nodes": []string{"n1"}, "extra": map[string]any{"k": "v"}, "owner": "proj",
	})
	require.Equal(t, 201, st, body)
	require.Equal(t, "allocating", body["state"])
	require.Equal(t, a.srv.URL+"/v1/allocations/"+body["uuid"].(string), h.Get("Location"))
	require.Len(t, body["candidate_nodes"], 1)
	require.Equal(t, "proj", body["owner"])
	id := body["uuid"].(string)

	st, body, _ = a.call("POST", "/v1/allocations", "1.82", map[string]any{"resource_class": "gold", "name": "alloc-1"})
	require.Equal(t, 409, st)
	require.Equal(t, "An allocation with name alloc-1 already exists.", fault(t, body))
	st, body, _ = a.call("POST", "/v1/allocations", "1.82", map[string]any{"resource_class": "gold", "uuid": id})
	require.Equal(t, 409, st)
	require.Equal(t, fmt.Sprintf("An allocation with UUID %s already exists.", id), fault(t, body))

	st, body, _ = a.call("GET", "/v1/allocations/alloc-1?fields=uuid,state", "1.82", nil)
	require.Equal(t, 200, st)
	require.Equal(t, []string{"links", "state", "uuid"}, keys(body))
	st, _, _ = a.call("GET", "/v1/allocations/alloc-1?fields=owner", "1.59", nil)
	require.Equal(t, 406, st)
	st, body, _ = a.call("GET", "/v1/allocations/alloc-1?fields=bogus", "1.82", nil)
	require.Equal(t, 400, st)
	require.Equal(t, `Field(s) "bogus" are not valid`, fault(t, body))
	st, body, _ = a.call("GET", "/v1/allocations/alloc-1", "1.59", nil)
	require.Equal(t, 200, st)
	require.NotContains(t, body, "owner")

	// Process it: the allocation becomes active on n1.
	a.reserveAll(a.conductor("c"))
	st, body, _ = a.call("GET", "/v1/nodes/n1/allocation", "1.82", nil)
	require.Equal(t, 200, st)
	require.Equal(t, "active", body["state"])
	require.NotNil(t, body["node_uuid"])

	// PATCH
	st, _, _ = a.call("PATCH", "/v1/allocations/alloc-1", "1.56", []map[string]any{{"op": "replace", "path": "/name", "value": "x"}})
	require.Equal(t, 405, st)
	st, body, _ = a.call("PATCH", "/v1/allocations/alloc-1", "1.82", []map[string]any{{"op": "replace", "path": "/resource_class", "value": "x"}})
	require.Equal(t, 400, st)
	require.Equal(t, "Cannot patch /resource_class. Only the following can be updated: name, extra", fault(t, body))
	st, body, _ = a.call("PATCH", "/v1/allocations/alloc-1", "1.82", []map[string]any{
		{"op": "replace", "path": "/name", "value": "renamed"}, {"op": "add", "path": "/extra/x", "value": 1}})
	require.Equal(t, 200, st, body)
	require.Equal(t, "renamed", body["name"])
	require.Equal(t, map[string]any{"k": "v", "x": float64(1)}, body["extra"])

	// List with filters, paging and next links.
	for i := range 3 {
		st, _, _ := a.call("POST", "/v1/allocations", "1.82", map[string]any{"resource_class": "silver", "name": fmt.Sprintf("s%d", i)})
		require.Equal(t, 201, st)
	}
	st, body, _ = a.call("GET", "/v1/allocations?resource_class=silver&limit=2", "1.82", nil)
	require.Equal(t, 200, st)
	require.Len(t, body["allocations"], 2)
	next := body["next"].(string)
	require.Contains(t, next, "resource_class=silver")
	st, body, _ = a.call("GET", strings.TrimPrefix(next, a.srv.URL), "1.82", nil)
	require.Equal(t, 200, st)
	require.Len(t, body["allocations"], 1)
	require.NotContains(t, body, "next")
	st, body, _ = a.call("GET", "/v1/allocations?state=active", "1.82", nil)
	require.Equal(t, 200, st)
	require.Len(t, body["allocations"], 1)
	st, body, _ = a.call("GET", "/v1/allocations?node=n1", "1.82", nil)
	require.Equal(t, 200, st)
	require.Len(t, body["allocations"], 1)
	st, body, _ = a.call("GET", "/v1/allocations?node=nope", "1.82", nil)
	require.Equal(t, 400, st)
	require.NotEmpty(t, fault(t, body))
	st, body, _ = a.call("GET", "/v1/allocations?sort_key=traits", "1.82", nil)
	require.Equal(t, 400, st)
	require.Equal(t, "The sort_key value traits is an invalid field for sorting", fault(t, body))
	st, body, _ = a.call("GET", "/v1/allocations?sort_key=name&sort_dir=desc&limit=2", "1.82", nil)
	require.Equal(t, 200, st)
	require.Equal(t, "s2", body["allocations"].([]any)[0].(map[string]any)["name"])
	st, body, _ = a.call("GET", "/v1/allocations?limit=0", "1.82", nil)
	require.Equal(t, 400, st)
	require.Equal(t, "Limit must be positive", fault(t, body))

	// DELETE of an active allocation on an available node releases the node.
	st, _, _ = a.call("DELETE", "/v1/allocations/renamed", "1.82", nil)
	require.Equal(t, 204, st)
	var free bool
	require.NoError(t, a.pool.QueryRow(context.Background(),
		`SELECT instance_uuid IS NULL AND allocation_id IS NULL FROM nodes WHERE name = 'n1'`).Scan(&free))
	require.True(t, free)
	st, body, _ = a.call("GET", "/v1/allocations/renamed", "1.82", nil)
	require.Equal(t, 404, st)
	require.Equal(t, "Allocation renamed could not be found.", fault(t, body))
	st, body, _ = a.call("GET", "/v1/nodes/n1/allocation", "1.82", nil)
	require.Equal(t, 404, st)
	require.Equal(t, "Allocation for node n1 was not found", fault(t, body))
}

func TestAPIDeleteRefusedForActiveNode(t *testing.T) {
	t.Parallel()
	a := setupAPI(t)
	a.node("n1", "gold")
	st, body, _ := a.call("POST", "/v1/allocations", "1.82", map[string]any{"resource_class": "gold"})
	require.Equal(t, 201, st)
	a.reserveAll(a.conductor("c"))
	_, err := a.pool.Exec(context.Background(), `UPDATE nodes SET provision_state = 'active' WHERE name = 'n1'`)
	require.NoError(t, err)
	st, body2, _ := a.call("DELETE", "/v1/allocations/"+body["uuid"].(string), "1.82", nil)
	require.Equal(t, 409, st)
	require.Contains(t, fault(t, body2), "because the node is active (and maintenance mode is off)")
	_, err = a.pool.Exec(context.Background(), `UPDATE nodes SET maintenance = true WHERE name = 'n1'`)
	require.NoError(t, err)
	st, _, _ = a.call("DELETE", "/v1/nodes/n1/allocation", "1.82", nil)
	require.Equal(t, 204, st)
}

func TestAPIBackfill(t *testing.T) {
	t.Parallel()
	a := setupAPI(t)
	a.node("deployed", "gold", "CUSTOM_A")
	a.node("idle", "gold")
	_, err := a.pool.Exec(context.Background(), `UPDATE nodes SET provision_state = 'active' WHERE name = 'deployed'`)
	require.NoError(t, err)
	// Not active: 400 and nothing stored (Ironic answers 500 and keeps an error row).
	st, body, _ := a.call("POST", "/v1/allocations", "1.58", map[string]any{"node": "idle"})
	require.Equal(t, 400, st)
	require.Contains(t, fault(t, body), `Node must be in the "active" state, but the current state is "available"`)
	st, body, _ = a.call("POST", "/v1/allocations", "1.58", map[string]any{"node": "deployed", "traits": []string{"CUSTOM_B"}})
	require.Equal(t, 400, st)
	require.Contains(t, fault(t, body), "does not match the requested traits")
	var count int
	require.NoError(t, a.pool.QueryRow(context.Background(), `SELECT count(*) FROM allocations`).Scan(&count))
	require.Zero(t, count)

	st, body, _ = a.call("POST", "/v1/allocations", "1.58", map[string]any{"node": "deployed", "traits": []string{"CUSTOM_A"}})
	require.Equal(t, 201, st, body)
	require.Equal(t, "active", body["state"])
	require.Equal(t, "gold", body["resource_class"])
	var inst uuid.UUID
	var info map[string]any
	require.NoError(t, a.pool.QueryRow(context.Background(),
		`SELECT instance_uuid, instance_info FROM nodes WHERE name = 'deployed'`).Scan(&inst, &info))
	require.Equal(t, body["uuid"], inst.String())
	require.Equal(t, []any{"CUSTOM_A"}, info["traits"])
	st, body, _ = a.call("POST", "/v1/allocations", "1.58", map[string]any{"node": "deployed"})
	require.Equal(t, 409, st)
	require.Contains(t, fault(t, body), "is associated with instance")
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestAPIInvalidIdent: an identifier that is neither a uuid nor a valid
// name is 400 with Ironic 21.4's messages (as the reference answers: the
// argument allocation_ident for GET and DELETE, get_rpc_allocation for
// PATCH, both after the version gate; the node _lookup for
// /nodes/{ident}/allocation, before it); a valid unknown name stays 404.
func TestAPIInvalidIdent(t *testing.T) {
	t.Parallel()
	a := setupAPI(t)
	for _, tc := range []struct {
		method, path, ver string
		status            int
		msg               string
	}{
		{"GET", "/v1/allocations/bad%20ident", "1.52", 400, "Expected UUID or name for allocation_ident: bad ident"},
		{"PATCH", "/v1/allocations/bad%20ident", "1.60", 400, "Expected a logical name or UUID but received bad ident."},
		{"DELETE", "/v1/allocations/bad%20ident", "1.52", 400, "Expected UUID or name for allocation_ident: bad ident"},
		{"GET", "/v1/allocations/bad%20ident", "", 404, "The API version does not allow allocations"},
		{"PATCH", "/v1/allocations/bad%20ident", "1.51", 405, "The API version does not allow allocations"},
		{"PATCH", "/v1/allocations/bad%20ident", "1.52", 405, "The API version does not allow updating allocations"},
		{"GET", "/v1/allocations/good-name", "1.52", 404, "Allocation good-name could not be found."},
		{"GET", "/v1/nodes/bad%20ident/allocation", "1.52", 400, "Expected UUID or name for node: bad ident"},
		{"DELETE", "/v1/nodes/bad%20ident/allocation", "1.52", 400, "Expected UUID or name for node: bad ident"},
		{"GET", "/v1/nodes/bad%20ident/allocation", "", 400, "Expected UUID or name for node: bad ident"},
		{"GET", "/v1/nodes/n1/allocation", "1.51", 404, "The resource could not be found."},
		{"DELETE", "/v1/nodes/n1/allocation", "", 404, "The resource could not be found."},
		// Other /v1 paths are not the allocation API's to answer.
		{"PUT", "/v1/nodes/n1/states/raid", "", 404, "The resource could not be found."},
		{"GET", "/v1/nope", "", 404, "The resource could not be found."},
	} {
		var body any
		if tc.method == "PATCH" {
			body = []map[string]any{{"op": "add", "path": "/extra/x", "value": "y"}}
		}
		st, out, _ := a.call(tc.method, tc.path, tc.ver, body)
		require.Equal(t, tc.status, st, "%s %s", tc.method, tc.path)
		require.Equal(t, tc.msg, fault(t, out), "%s %s", tc.method, tc.path)
	}
}

// TestDeallocationRuleAgrees checks that the database's rule
// (metalloc_deallocation_blocked, used by DELETE) and CheckDeallocation
// (its messages, and the group delete) agree on every provision state, with
// and without a target, in and out of maintenance.
func TestDeallocationRuleAgrees(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	for _, state := range node.States {
		empty, active := "", "active"
		for _, target := range []*string{nil, &empty, &active} {
			for _, maint := range []bool{false, true} {
				var blocked bool
				require.NoError(t, pool.QueryRow(context.Background(),
					`SELECT metalloc_deallocation_blocked($1, $2, $3, $4)`, state, target, maint, node.UpdateAllowedStates).Scan(&blocked))
				err := CheckDeallocation(uuid.New(), state, target, maint, uuid.New())
				require.Equal(t, err != nil, blocked, "state %q target %v maintenance %v", state, target, maint)
			}
		}
	}
}
