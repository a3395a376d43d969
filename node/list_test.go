package node_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// uuids returns the uuids of a node list body.
func uuids(t *testing.T, body map[string]any) []string {
	t.Helper()
	var out []string
	for _, n := range body["nodes"].([]any) {
		out = append(out, n.(map[string]any)["uuid"].(string))
	}
	return out
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.createNode(map[string]any{"name": "a", "resource_class": "gold", "owner": "p1", "lessee": "l1",
		"description": "rack 7 top", "conductor_group": "g1", "shard": "s1"})["uuid"].(string)
	b := e.availableNode(map[string]any{"name": "b", "resource_class": "silver", "owner": "p2", "retired_reason": ""})
	c := e.activeNode(map[string]any{"name": "c", "resource_class": "gold", "lessee": "p1", "shard": "s2"})
	e.must(http.StatusAccepted, http.MethodPut, "/v1/nodes/"+b+"/maintenance", "1.82", map[string]any{"reason": "broken"})
	au := e.allocate(c)
	_ = au

	list := func(query, version string) []string {
		t.Helper()
		r := e.must(http.StatusOK, http.MethodGet, "/v1/nodes?"+query, version, nil)
		got := uuids(t, r.body)
		slices.Sort(got)
		return got
	}
	sorted := func(ids ...string) []string { slices.Sort(ids); return ids }

	require.Equal(t, sorted(a, b, c), list("", "1.82"))
	require.Equal(t, sorted(b), list("provision_state=available", "1.82"))
	require.Equal(t, sorted(a), list("provision_state=enroll", "1.82"))
	require.Equal(t, sorted(b), list("maintenance=true", "1.82"))
	require.Equal(t, sorted(a, c), list("maintenance=False", "1.82"))
	require.Equal(t, sorted(a, c), list("resource_class=gold", "1.82"))
	require.Equal(t, sorted(c), list("associated=true", "1.82"))
	require.Equal(t, sorted(a, b), list("associated=false", "1.82"))
	require.Equal(t, sorted(a), list("owner=p1", "1.82"))
	require.Equal(t, sorted(a), list("lessee=l1", "1.82"))
	require.Equal(t, sorted(a, c), list("project=p1", "1.82"))
	require.Equal(t, sorted(a, b, c), list("driver=fake-hardware", "1.82"))
	require.Equal(t, sorted(a), list("conductor_group=g1", "1.82"))
	require.Equal(t, sorted(a), list("description_contains=ck+7", "1.82"))
	require.Equal(t, sorted(a, b, c), list("retired=false", "1.82"))
	require.Empty(t, list("retired=true", "1.82"))
	require.Equal(t, sorted(a, c), list("shard=s1,S2", "1.82"))
	require.Equal(t, sorted(b), list("sharded=false", "1.82"))
	require.Empty(t, list("fault=power+failure", "1.82"))

	// Filtering by instance_uuid gives no next link even when the page is full.
	r := e.must(http.StatusOK, http.MethodGet, "/v1/nodes?limit=1&instance_uuid="+au.String(), "1.82", nil)
	require.Equal(t, []string{c}, uuids(t, r.body))
	require.NotContains(t, r.body, "next")

	// Default list fields and detail.
	r = e.must(http.StatusOK, http.MethodGet, "/v1/nodes?provision_state=active", "1.82", nil)
	item := r.body["nodes"].([]any)[0].(map[string]any)
	keys := make([]string, 0, len(item))
	for k := range item {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	require.Equal(t, []string{"instance_uuid", "links", "maintenance", "name", "power_state", "provision_state", "uuid"}, keys)
	require.Equal(t, au.String(), item["instance_uuid"])
	require.Equal(t, "power off", item["power_state"])
	r = e.must(http.StatusOK, http.MethodGet, "/v1/nodes/detail?provision_state=active", "1.82", nil)
	item = r.body["nodes"].([]any)[0].(map[string]any)
	require.Equal(t, au.String(), item["allocation_uuid"])
	require.Contains(t, item, "driver_info")
	r = e.must(http.StatusOK, http.MethodGet, "/v1/nodes?detail=true&provision_state=active", "1.82", nil)
	require.Contains(t, r.body["nodes"].([]any)[0], "properties")
	r = e.must(http.StatusOK, http.MethodGet, "/v1/nodes?fields=uuid,resource_class&resource_class=silver", "1.82", nil)
	require.Equal(t, []any{map[string]any{"uuid": b, "resource_class": "silver", "links": []any{
		map[string]any{"href": "http://metalloc.test:6385/v1/nodes/" + b, "rel": "self"},
		map[string]any{"href": "http://metalloc.test:6385/nodes/" + b, "rel": "bookmark"},
	}}}, r.body["nodes"])
	// name is hidden below 1.5 in lists too.
	r = e.must(http.StatusOK, http.MethodGet, "/v1/nodes", "1.4", nil)
	require.NotContains(t, r.body["nodes"].([]any)[0], "name")

	bad := []struct {
		query, version string
		status         int
		msg            string
	}{
		{"provision_state=bogus", "1.82", 400, `Provision state "bogus" is not valid`},
		{"provision_state=enroll", "1.8", 406, ""},
		{"driver=x", "1.15", 406, "Request not acceptable. The minimal required API version should be 1.16"},
		{"resource_class=x", "1.20", 406, "should be 1.21"},
		{"owner=x", "1.49", 406, "should be 1.50"},
		{"lessee=x", "1.64", 406, "should be 1.65"},
		{"shard=x", "1.81", 406, "should be 1.82"},
		{"conductor_group=x", "1.45", 406, "should be 1.46"},
		{"fault=x", "1.41", 406, "should be 1.42"},
		{"fault=bogus", "1.82", 400, `Unrecognized fault "bogus" is specified, allowed faults are ('power failure', 'clean failure', 'rescue abort failure')`},
		{"maintenance=perhaps", "1.82", 400, "Invalid maintenance: Unrecognized value 'perhaps'"},
		{"instance_uuid=x", "1.82", 400, "Expected UUID for instance_uuid: x"},
		{"fields=uuid,bogus", "1.82", 400, "Field bogus is not a valid field."},
		{"fields=uuid", "1.7", 406, ""},
		{"fields=lessee", "1.64", 406, ""},
		{"detail=true", "1.42", 400, "Invalid query parameter ?detail=true received."},
		{"detail=true&fields=uuid", "1.82", 400, "Can not specify ?detail=True and fields in the same request."},
		{"sort_key=bogus", "1.82", 400, `The sort_key value "bogus" is an invalid field for sorting`},
		{"sort_key=properties", "1.82", 400, "The sort_key value properties is an invalid field for sorting"},
		{"sort_key=owner", "1.49", 406, ""},
		{"sort_dir=sideways", "1.82", 400, "Invalid sort direction: sideways. Acceptable values are 'asc' or 'desc'"},
		{"limit=0", "1.82", 400, "Limit must be positive"},
		{"marker=bogus", "1.82", 400, "Expected UUID for marker: bogus"},
		{"marker=6c3fd7b4-3ee6-4a5f-9d1d-7d4a2b1c0e11", "1.82", 404, "Node 6c3fd7b4-3ee6-4a5f-9d1d-7d4a2b1c0e11 could not be found."},
		{"chassis_uuid=6c3fd7b4-3ee6-4a5f-9d1d-7d4a2b1c0e11", "1.82", 404, "Chassis 6c3fd7b4-3ee6-4a5f-9d1d-7d4a2b1c0e11 could not be found."},
		{"colour=blue", "1.82", 400, "Unexpected arguments: colour"},
	}
	for _, tc := range bad {
		r := e.must(tc.status, http.MethodGet, "/v1/nodes?"+tc.query, tc.version, nil)
		if tc.msg != "" {
			require.Contains(t, r.fault(t), tc.msg, tc.query)
		}
	}
	// /detail takes no fields.
	r = e.must(http.StatusBadRequest, http.MethodGet, "/v1/nodes/detail?fields=uuid", "1.82", nil)
	require.Equal(t, "Unexpected arguments: fields", r.fault(t))
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// 12 nodes; every third has no name, so name sorting meets NULLs.
	var all []string
	names := map[string]string{}
	for i := range 12 {
		fields := map[string]any{"resource_class": fmt.Sprintf("rc-%d", i%4)}
		if i%3 != 0 {
			fields["name"] = fmt.Sprintf("node-%02d", (i*7)%12)
		}
		b := e.createNode(fields)
		all = append(all, b["uuid"].(string))
		if n, ok := b["name"].(string); ok {
			names[b["uuid"].(string)] = n
		}
	}

	walk := func(query string, limit int) []string {
		t.Helper()
		var got []string
		path := fmt.Sprintf("/v1/nodes?limit=%d", limit)
		if query != "" {
			path += "&" + query
		}
		for pages := 0; ; pages++ {
			require.Less(t, pages, 20)
			r := e.must(http.StatusOK, http.MethodGet, path, "1.82", nil)
			page := uuids(t, r.body)
			require.LessOrEqual(t, len(page), limit)
			got = append(got, page...)
			next, ok := r.body["next"].(string)
			if !ok {
				require.Less(t, len(page), limit+1)
				break
			}
			require.True(t, strings.HasPrefix(next, "http://metalloc.test:6385/v1/nodes?"), next)
			u, err := url.Parse(next)
			require.NoError(t, err)
			require.Equal(t, page[len(page)-1], u.Query().Get("marker"))
			require.Equal(t, fmt.Sprint(limit), u.Query().Get("limit"))
			path = "/v1/nodes?" + u.RawQuery
		}
		return got
	}

	// Default order: creation (id).
	require.Equal(t, all, walk("", 5))
	require.Equal(t, all, walk("", 12+0))
	rev := slices.Clone(all)
	slices.Reverse(rev)
	require.Equal(t, rev, walk("sort_dir=desc", 5))

	// By name: named nodes in name order, then the unnamed ones (NULLs
	// last ascending) in id order; descending is the exact reverse.
	var want []string
	named := slices.Clone(all)
	named = slices.DeleteFunc(named, func(u string) bool { return names[u] == "" })
	slices.SortStableFunc(named, func(a, b string) int { return strings.Compare(names[a], names[b]) })
	want = append(want, named...)
	for _, u := range all {
		if names[u] == "" {
			want = append(want, u)
		}
	}
	require.Equal(t, want, walk("sort_key=name", 4))
	require.Equal(t, want, walk("sort_key=name&sort_dir=asc", 1))
	wantDesc := slices.Clone(want)
	slices.Reverse(wantDesc)
	require.Equal(t, wantDesc, walk("sort_key=name&sort_dir=desc", 5))

	// Ties on the sort key are broken by id, in the same direction.
	byRC := walk("sort_key=resource_class", 3)
	require.Len(t, byRC, 12)
	for i := 1; i < len(byRC); i++ {
		pi, ci := slices.Index(all, byRC[i-1]), slices.Index(all, byRC[i])
		if pi%4 == ci%4 {
			require.Less(t, pi, ci)
		} else {
			require.Less(t, pi%4, ci%4)
		}
	}
	// Filters are kept in next links.
	got := walk("resource_class=rc-1&fields=uuid,name", 2)
	require.Equal(t, []string{all[1], all[5], all[9]}, got)
	// Interfaces are sortable too (all equal: id order).
	require.Equal(t, all, walk("sort_key=deploy_interface", 7))

	// The detail collection pages the same way.
	r := e.must(http.StatusOK, http.MethodGet, "/v1/nodes/detail?limit=2", "1.82", nil)
	require.True(t, strings.HasPrefix(r.body["next"].(string), "http://metalloc.test:6385/v1/nodes/detail?"))
	// A page smaller than the limit has no next link; limit is capped by
	// MaxLimit (100).
	r = e.must(http.StatusOK, http.MethodGet, "/v1/nodes?limit=1000", "1.82", nil)
	require.Len(t, uuids(t, r.body), 12)
	require.NotContains(t, r.body, "next")
}
