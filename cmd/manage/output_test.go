package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// threeGroups is GET /v1/allocation_groups with three groups, one failed.
const threeGroups = `{"allocation_groups": [
 {"uuid": "11111111-1111-1111-1111-111111111111", "name": "train-1", "state": "active", "count": 3,
  "resource_class": "baremetal-gpu", "traits": [], "required": "rack", "domain": "2/3", "owner": null,
  "members": ["a1", "a2", "a3"], "nodes": ["n1", "n2", "n3"], "last_error": null, "extra": {},
  "candidate_nodes": [], "created_at": "2026-11-26T10:00:00+00:00", "updated_at": null, "links": []},
 {"uuid": "22222222-2222-2222-2222-222222222222", "name": null, "state": "error", "count": 4,
  "resource_class": "baremetal-gpu", "traits": ["CUSTOM_IB"], "required": "rack", "domain": null, "owner": null,
  "members": [], "nodes": [], "last_error": "no rack has 4 free nodes", "extra": {},
  "candidate_nodes": [], "created_at": "2026-11-26T10:01:00+00:00", "updated_at": null, "links": []},
 {"uuid": "33333333-3333-3333-3333-333333333333", "name": "web", "state": "allocating", "count": 2,
  "resource_class": "baremetal-gold", "traits": [], "preferred": "row", "domain": null, "owner": "p1",
  "members": [], "nodes": [], "last_error": null, "extra": {},
  "candidate_nodes": [], "created_at": "2026-11-26T10:02:00+00:00", "updated_at": null, "links": []}]}`

// fakeAPI answers every request with body (a function of the request) and
// records the requests' method and path.
func fakeAPI(t *testing.T, body func(r *http.Request) (int, string)) (*httptest.Server, *[]string) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.RequestURI())
		status, b := body(r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, b)
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

// runCmd runs a fresh command c made by mk with args against endpoint and
// returns its standard output.
func runCmd(t *testing.T, mk func() *cobra.Command, endpoint string, args ...string) (string, error) {
	t.Helper()
	cmd := mk()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(append(args, "--endpoint", endpoint))
	err := cmd.Execute()
	return out.String(), err
}

// TestAllocationGroupListFormats: list prints a table (a header and a row
// per group, not the raw JSON of about a hundred lines), and -f json,
// yaml and value and -c give what OpenStackClient's lists give.
func TestAllocationGroupListFormats(t *testing.T) {
	srv, seen := fakeAPI(t, func(*http.Request) (int, string) { return 200, threeGroups })

	out, err := runCmd(t, allocationGroupCmd, srv.URL, "list", "--state", "error")
	require.NoError(t, err)
	require.Equal(t, "GET /v1/allocation_groups?state=error", (*seen)[0])
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 7, out) // rule, heading, rule, 3 rows, rule
	require.Regexp(t, `^\| UUID +\| Name +\| State +\| Count \| Resource Class \| Placement +\| Domain \|$`, lines[1])
	require.Regexp(t, `^\| 11111111-1111-1111-1111-111111111111 \| train-1 +\| active +\| 3 +\| baremetal-gpu +\| required rack +\| 2/3 +\|$`, lines[3])
	require.Contains(t, lines[4], "| error ")
	require.Contains(t, lines[5], "| preferred row ")
	require.NotContains(t, out, "no rack has", "the last error is a --long column")

	out, err = runCmd(t, allocationGroupCmd, srv.URL, "list", "--long")
	require.NoError(t, err)
	require.Contains(t, out, "| no rack has 4 free nodes ")
	require.Contains(t, out, "| a1, a2, a3 ")

	out, err = runCmd(t, allocationGroupCmd, srv.URL, "list", "-f", "json")
	require.NoError(t, err)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	require.Len(t, rows, 3)
	require.Equal(t, map[string]any{"UUID": "22222222-2222-2222-2222-222222222222", "Name": nil, "State": "error",
		"Count": float64(4), "Resource Class": "baremetal-gpu", "Placement": "required rack", "Domain": nil}, rows[1])
	require.True(t, strings.HasPrefix(out, "[\n  {\n    \"UUID\": "), "columns keep their order: %s", out)

	out, err = runCmd(t, allocationGroupCmd, srv.URL, "list", "-f", "yaml", "-c", "uuid", "-c", "Last Error")
	require.NoError(t, err)
	var yrows []map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(out), &yrows), out)
	require.Equal(t, []map[string]any{
		{"UUID": "11111111-1111-1111-1111-111111111111", "Last Error": nil},
		{"UUID": "22222222-2222-2222-2222-222222222222", "Last Error": "no rack has 4 free nodes"},
		{"UUID": "33333333-3333-3333-3333-333333333333", "Last Error": nil},
	}, yrows)

	out, err = runCmd(t, allocationGroupCmd, srv.URL, "list", "-f", "value", "-c", "name", "-c", "state")
	require.NoError(t, err)
	require.Equal(t, "train-1 active\nNone error\nweb allocating\n", out)

	_, err = runCmd(t, allocationGroupCmd, srv.URL, "list", "-c", "nope")
	require.ErrorContains(t, err, `-c "nope": no such column`)
	n := len(*seen)
	_, err = runCmd(t, allocationGroupCmd, srv.URL, "list", "-f", "xml")
	require.ErrorContains(t, err, `-f "xml": want one of table, json, yaml, value`)
	require.Len(t, *seen, n, "a bad -f is refused before any request")
}

// TestShowFormatsAndDeletes: show prints a Field/Value table by default,
// the document with -f json and the named fields with -c; delete says what
// it deleted (it printed nothing).
func TestShowFormatsAndDeletes(t *testing.T) {
	var groups struct {
		AllocationGroups []json.RawMessage `json:"allocation_groups"`
	}
	require.NoError(t, json.Unmarshal([]byte(threeGroups), &groups))
	group := string(groups.AllocationGroups[0])
	alloc := `{"uuid": "44444444-4444-4444-4444-444444444444", "name": "m1", "state": "active",
		"node_uuid": "55555555-5555-5555-5555-555555555555", "resource_class": "gold", "traits": ["CUSTOM_A"],
		"last_error": null, "extra": {"k": "v"}, "links": []}`
	srv, seen := fakeAPI(t, func(r *http.Request) (int, string) {
		switch {
		case r.Method == http.MethodDelete:
			return 204, ""
		case strings.HasPrefix(r.URL.Path, "/v1/allocation_groups/"):
			return 200, group
		}
		return 200, alloc
	})

	out, err := runCmd(t, allocationGroupCmd, srv.URL, "show", "train-1")
	require.NoError(t, err)
	lines := strings.Split(out, "\n")
	require.Regexp(t, `^\| Field +\| Value +\|$`, lines[1])
	require.Regexp(t, `^\| uuid +\| 11111111-1111-1111-1111-111111111111 +\|$`, lines[3])
	require.Regexp(t, `^\| name +\| train-1 +\|$`, lines[4])
	require.Regexp(t, `\n\| members +\| a1, a2, a3 +\|\n`, out)
	require.NotContains(t, out, "links")

	out, err = runCmd(t, allocationCmd, srv.URL, "show", "m1", "-f", "json")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	require.Equal(t, "m1", doc["name"])
	require.Equal(t, map[string]any{"k": "v"}, doc["extra"])
	out, err = runCmd(t, allocationCmd, srv.URL, "show", "m1", "-f", "value", "-c", "node_uuid", "-c", "traits")
	require.NoError(t, err)
	require.Equal(t, "55555555-5555-5555-5555-555555555555\nCUSTOM_A\n", out)
	out, err = runCmd(t, allocationCmd, srv.URL, "show", "m1")
	require.NoError(t, err)
	require.Regexp(t, `\n\| extra +\| \{"k":"v"\} +\|\n`, out)
	require.Regexp(t, `\n\| last_error +\| None +\|\n`, out)

	*seen = nil
	out, err = runCmd(t, allocationGroupCmd, srv.URL, "delete", "train-1")
	require.NoError(t, err)
	require.Equal(t, "Deleted allocation group train-1 (11111111-1111-1111-1111-111111111111), active, released 3 members\n", out)
	require.Equal(t, []string{"GET /v1/allocation_groups/train-1", "DELETE /v1/allocation_groups/11111111-1111-1111-1111-111111111111"}, *seen)
	*seen = nil
	out, err = runCmd(t, allocationCmd, srv.URL, "delete", "m1")
	require.NoError(t, err)
	require.Equal(t, "Deleted allocation m1 (44444444-4444-4444-4444-444444444444), released node 55555555-5555-5555-5555-555555555555\n", out)
	require.Equal(t, []string{"GET /v1/allocations/m1", "DELETE /v1/allocations/44444444-4444-4444-4444-444444444444"}, *seen)
}

// TestAllocationSendsGivenCredentials: --username/--password are sent
// whatever api.auth_strategy says (here the default, noauth), as are
// --token and $METALLOC_API_USERNAME; both kinds at once are refused.
func TestAllocationSendsGivenCredentials(t *testing.T) {
	var auth, token string
	srv, _ := fakeAPI(t, func(r *http.Request) (int, string) {
		auth, token = r.Header.Get("Authorization"), r.Header.Get("X-Auth-Token")
		if u, p, ok := r.BasicAuth(); !ok || u != "operator" || p != "s3cret" {
			return 401, `{"error_message": "{\"faultstring\": \"Unauthorized\"}"}`
		}
		return 200, `{"uuid": "u", "state": "active"}`
	})
	t.Setenv("METALLOC_API_USERNAME", "")
	t.Setenv("METALLOC_API_PASSWORD", "")
	t.Setenv("OS_TOKEN", "")
	_, err := runCmd(t, allocationCmd, srv.URL, "show", "m1", "--username", "operator", "--password", "s3cret")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(auth, "Basic "), auth)

	t.Setenv("METALLOC_API_USERNAME", "operator")
	t.Setenv("METALLOC_API_PASSWORD", "s3cret")
	_, err = runCmd(t, allocationGroupCmd, srv.URL, "show", "g1")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(auth, "Basic "), auth)

	t.Setenv("METALLOC_API_USERNAME", "")
	_, err = runCmd(t, allocationCmd, srv.URL, "show", "m1", "--token", "tok")
	require.ErrorContains(t, err, "401")
	require.Equal(t, "tok", token)
	_, err = runCmd(t, allocationCmd, srv.URL, "show", "m1", "--token", "tok", "--username", "operator")
	require.ErrorContains(t, err, "not both")
}
