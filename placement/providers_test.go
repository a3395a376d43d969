package placement

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rpErrCode is the code of the first error of a Placement error body.
func rpErrCode(t *testing.T, body map[string]any) string {
	t.Helper()
	errs, ok := body["errors"].([]any)
	require.True(t, ok, "not an error body: %v", body)
	code, _ := errs[0].(map[string]any)["code"].(string)
	return code
}

// rpErrDetail is the detail of the first error of a Placement error body.
func rpErrDetail(t *testing.T, body map[string]any) string {
	t.Helper()
	errs, ok := body["errors"].([]any)
	require.True(t, ok, "not an error body: %v", body)
	d, _ := errs[0].(map[string]any)["detail"].(string)
	return d
}

// rpCreate creates a provider at 1.20 (parent "" for a root) and
// returns its body.
func rpCreate(t *testing.T, srv *httptest.Server, name, id, parent string) map[string]any {
	t.Helper()
	body := `{"name": "` + name + `"`
	if id != "" {
		body += `, "uuid": "` + id + `"`
	}
	if parent != "" {
		body += `, "parent_provider_uuid": "` + parent + `"`
	}
	status, _, out := call(t, srv, "POST", "/resource_providers", "1.20", body+"}")
	require.Equal(t, 200, status, "%v", out)
	return out
}

const (
	rpU1 = "11111111-1111-1111-1111-111111111111"
	rpU2 = "22222222-2222-2222-2222-222222222222"
	rpU3 = "33333333-3333-3333-3333-333333333333"
	rpU4 = "44444444-4444-4444-4444-444444444444"
)

func TestProviderCRUD(t *testing.T) {
	t.Parallel()
	srv := testServer(t)

	// 1.0: 201, empty body, Location.
	status, h, body := call(t, srv, "POST", "/resource_providers", "", `{"name": "a", "uuid": "`+rpU1+`"}`)
	require.Equal(t, 201, status)
	require.Nil(t, body)
	require.Equal(t, srv.URL+"/resource_providers/"+rpU1, h.Get("Location"))

	// 1.20: 200 with the provider.
	status, h, body = call(t, srv, "POST", "/resource_providers", "1.20", `{"name": "b"}`)
	require.Equal(t, 200, status)
	require.NotEmpty(t, body["uuid"])
	require.Equal(t, srv.URL+"/resource_providers/"+body["uuid"].(string), h.Get("Location"))
	require.Equal(t, body["uuid"], body["root_provider_uuid"])
	require.Nil(t, body["parent_provider_uuid"])
	require.EqualValues(t, 0, body["generation"])
	require.NotEmpty(t, h.Get("Last-Modified"))

	// Duplicates.
	status, _, body = call(t, srv, "POST", "/resource_providers", "1.23", `{"name": "a"}`)
	require.Equal(t, 409, status)
	require.Equal(t, "placement.duplicate_name", rpErrCode(t, body))
	require.Contains(t, rpErrDetail(t, body), "name: a")
	status, _, body = call(t, srv, "POST", "/resource_providers", "1.23", `{"name": "z", "uuid": "`+rpU1+`"}`)
	require.Equal(t, 409, status)
	require.Contains(t, rpErrDetail(t, body), "uuid: "+rpU1)

	// Bad bodies.
	for _, b := range []string{`{}`, `{"name": 1}`, `{"name": "x", "uuid": "nope"}`, `{"name": "x", "foo": 1}`,
		`{"name": "x", "parent_provider_uuid": "` + rpU1 + `"}`} {
		status, _, body = call(t, srv, "POST", "/resource_providers", "1.13", b)
		require.Equal(t, 400, status, b)
		require.Contains(t, rpErrDetail(t, body), "JSON does not validate", b)
	}
	status, _, body = call(t, srv, "POST", "/resource_providers", "", `{"name": `)
	require.Equal(t, 400, status)
	require.Contains(t, rpErrDetail(t, body), "Malformed JSON")
	status, _, _ = call(t, srv, "POST", "/resource_providers", "", "")
	require.Equal(t, 415, status)

	// GET one per microversion.
	status, h, body = call(t, srv, "GET", "/resource_providers/"+rpU1, "", "")
	require.Equal(t, 200, status)
	require.Equal(t, "a", body["name"])
	require.Len(t, body["links"], 3)
	require.NotContains(t, body, "root_provider_uuid")
	require.Empty(t, h.Get("Last-Modified"))
	status, h, body = call(t, srv, "GET", "/resource_providers/"+rpU1, "1.14", "")
	require.Equal(t, 200, status)
	require.Len(t, body["links"], 6)
	require.Equal(t, rpU1, body["root_provider_uuid"])
	require.Empty(t, h.Get("Cache-Control"))
	_, h, _ = call(t, srv, "GET", "/resource_providers/"+rpU1, "1.15", "")
	require.Equal(t, "no-cache", h.Get("Cache-Control"))
	require.NotEmpty(t, h.Get("Last-Modified"))
	status, _, body = call(t, srv, "GET", "/resource_providers/"+rpU2, "", "")
	require.Equal(t, 404, status)
	require.Contains(t, rpErrDetail(t, body), "No resource provider with uuid "+rpU2)
	status, _, _ = call(t, srv, "GET", "/resource_providers/not-a-uuid", "", "")
	require.Equal(t, 404, status)

	// Rename.
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU1, "", `{"name": "a2"}`)
	require.Equal(t, 200, status)
	require.Equal(t, "a2", body["name"])
	require.EqualValues(t, 0, body["generation"])
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU1, "1.23", `{"name": "b"}`)
	require.Equal(t, 409, status)
	require.Equal(t, "placement.duplicate_name", rpErrCode(t, body))
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU1, "", `{"name": "a3", "uuid": "`+rpU2+`"}`)
	require.Equal(t, 400, status)
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU2, "", `{"name": "x"}`)
	require.Equal(t, 404, status)

	// Delete.
	status, _, _ = call(t, srv, "DELETE", "/resource_providers/"+rpU1, "", "")
	require.Equal(t, 204, status)
	status, _, body = call(t, srv, "DELETE", "/resource_providers/"+rpU1, "", "")
	require.Equal(t, 404, status)
	require.Contains(t, rpErrDetail(t, body), "found for delete")
}

func TestProviderTree(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	rpCreate(t, srv, "root", rpU1, "")
	child := rpCreate(t, srv, "child", rpU2, rpU1)
	require.Equal(t, rpU1, child["parent_provider_uuid"])
	require.Equal(t, rpU1, child["root_provider_uuid"])
	grand := rpCreate(t, srv, "grand", rpU3, rpU2)
	require.Equal(t, rpU1, grand["root_provider_uuid"])
	rpCreate(t, srv, "other", rpU4, "")

	// Parent errors.
	status, _, body := call(t, srv, "POST", "/resource_providers", "1.14",
		`{"name": "x", "parent_provider_uuid": "99999999-9999-9999-9999-999999999999"}`)
	require.Equal(t, 400, status)
	require.Contains(t, rpErrDetail(t, body), "parent provider UUID does not exist")
	status, _, body = call(t, srv, "POST", "/resource_providers", "1.14",
		`{"name": "x", "uuid": "`+rpU4[:35]+`5", "parent_provider_uuid": "`+rpU4[:35]+`5"}`)
	require.Equal(t, 400, status)
	require.Contains(t, rpErrDetail(t, body), "cannot be same as UUID")

	// in_tree.
	status, _, body = call(t, srv, "GET", "/resource_providers?in_tree="+rpU3, "1.14", "")
	require.Equal(t, 200, status)
	require.Len(t, body["resource_providers"], 3)
	status, _, _ = call(t, srv, "GET", "/resource_providers?in_tree="+rpU3, "1.13", "")
	require.Equal(t, 400, status)
	status, _, _ = call(t, srv, "GET", "/resource_providers?in_tree=bad", "1.14", "")
	require.Equal(t, 400, status)

	// Delete parent.
	status, _, body = call(t, srv, "DELETE", "/resource_providers/"+rpU2, "1.23", "")
	require.Equal(t, 409, status)
	require.Equal(t, "placement.resource_provider.cannot_delete_parent", rpErrCode(t, body))

	// Re-parenting: refused before 1.37, allowed after; loops refused.
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU3, "1.36",
		`{"name": "grand", "parent_provider_uuid": "`+rpU4+`"}`)
	require.Equal(t, 400, status)
	require.Contains(t, rpErrDetail(t, body), "re-parenting a provider is not currently allowed")
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU3, "1.36",
		`{"name": "grand", "parent_provider_uuid": null}`)
	require.Equal(t, 400, status)
	require.Contains(t, rpErrDetail(t, body), "un-parenting")
	// Same parent again is fine.
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU3, "1.36",
		`{"name": "grand", "parent_provider_uuid": "`+rpU2+`"}`)
	require.Equal(t, 200, status)
	// Setting a parent on a root is allowed from 1.14; its subtree follows.
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU4, "1.14",
		`{"name": "other", "parent_provider_uuid": "`+rpU3+`"}`)
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, rpU1, body["root_provider_uuid"])
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU1, "1.37",
		`{"name": "root", "parent_provider_uuid": "`+rpU4+`"}`)
	require.Equal(t, 400, status)
	require.Contains(t, rpErrDetail(t, body), "loop")
	// Move rpU2 (with rpU3, rpU4 below) out to be a root.
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU2, "1.37",
		`{"name": "child", "parent_provider_uuid": null}`)
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, rpU2, body["root_provider_uuid"])
	require.Nil(t, body["parent_provider_uuid"])
	_, _, body = call(t, srv, "GET", "/resource_providers/"+rpU4, "1.14", "")
	require.Equal(t, rpU2, body["root_provider_uuid"])
	// And back under rpU1.
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU2, "1.37",
		`{"name": "child", "parent_provider_uuid": "`+rpU1+`"}`)
	require.Equal(t, 200, status, "%v", body)
	_, _, body = call(t, srv, "GET", "/resource_providers/"+rpU4, "1.14", "")
	require.Equal(t, rpU1, body["root_provider_uuid"])
}

func TestProviderListFilters(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	rpCreate(t, srv, "one", rpU1, "")
	rpCreate(t, srv, "two", rpU2, "")
	rpCreate(t, srv, "three", rpU3, "")
	names := func(version, query string) []string {
		t.Helper()
		status, _, body := call(t, srv, "GET", "/resource_providers"+query, version, "")
		require.Equal(t, 200, status, "%s %v", query, body)
		var out []string
		for _, p := range body["resource_providers"].([]any) {
			out = append(out, p.(map[string]any)["name"].(string))
		}
		return out
	}
	require.Equal(t, []string{"one", "two", "three"}, names("", ""))
	require.Equal(t, []string{"two"}, names("", "?name=two"))
	require.Equal(t, []string{"three"}, names("", "?uuid="+rpU3))
	status, _, _ := call(t, srv, "GET", "/resource_providers?uuid=bad", "", "")
	require.Equal(t, 400, status)
	status, _, body := call(t, srv, "GET", "/resource_providers?foo=1", "", "")
	require.Equal(t, 400, status)
	require.Contains(t, rpErrDetail(t, body), "Invalid query string parameters")
	status, _, _ = call(t, srv, "GET", "/resource_providers?member_of="+rpU1, "1.2", "")
	require.Equal(t, 400, status)

	// Aggregates: rpU1 in A, rpU2 in A and B, rpU3 in none.
	aggA, aggB := "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa", "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU1+"/aggregates", "1.1", `["`+aggA+`"]`)
	require.Equal(t, 200, status)
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU2+"/aggregates", "1.1", `["`+aggA+`","`+aggB+`"]`)
	require.Equal(t, 200, status)
	require.Equal(t, []string{"one", "two"}, names("1.3", "?member_of="+aggA))
	require.Equal(t, []string{"two"}, names("1.3", "?member_of=in:"+aggB+",cccccccc-cccc-cccc-cccc-cccccccccccc"))
	status, _, _ = call(t, srv, "GET", "/resource_providers?member_of="+aggA+"&member_of="+aggB, "1.23", "")
	require.Equal(t, 400, status)
	require.Equal(t, []string{"two"}, names("1.24", "?member_of="+aggA+"&member_of="+aggB))
	status, _, _ = call(t, srv, "GET", "/resource_providers?member_of=!"+aggB, "1.31", "")
	require.Equal(t, 400, status)
	require.Equal(t, []string{"one", "three"}, names("1.32", "?member_of=!"+aggB))
	require.Equal(t, []string{"three"}, names("1.32", "?member_of=!in:"+aggA+","+aggB))
	status, _, _ = call(t, srv, "GET", "/resource_providers?member_of="+aggA+","+aggB, "1.3", "")
	require.Equal(t, 400, status)
	status, _, _ = call(t, srv, "GET", "/resource_providers?member_of=in:nope", "1.3", "")
	require.Equal(t, 400, status)

	// Traits: rpU1 has CUSTOM_A, rpU2 CUSTOM_A and CUSTOM_B.
	for _, tr := range []string{"CUSTOM_A", "CUSTOM_B"} {
		status, _, _ = call(t, srv, "PUT", "/traits/"+tr, "1.6", "")
		require.Equal(t, 201, status)
	}
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU1+"/traits", "1.6",
		`{"traits": ["CUSTOM_A"], "resource_provider_generation": 0}`)
	require.Equal(t, 200, status)
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU2+"/traits", "1.6",
		`{"traits": ["CUSTOM_A", "CUSTOM_B"], "resource_provider_generation": 0}`)
	require.Equal(t, 200, status)
	status, _, _ = call(t, srv, "GET", "/resource_providers?required=CUSTOM_A", "1.17", "")
	require.Equal(t, 400, status)
	require.Equal(t, []string{"one", "two"}, names("1.18", "?required=CUSTOM_A"))
	require.Equal(t, []string{"two"}, names("1.18", "?required=CUSTOM_A,CUSTOM_B"))
	status, _, _ = call(t, srv, "GET", "/resource_providers?required=CUSTOM_A,!CUSTOM_B", "1.21", "")
	require.Equal(t, 400, status)
	require.Equal(t, []string{"one"}, names("1.22", "?required=CUSTOM_A,!CUSTOM_B"))
	status, _, body = call(t, srv, "GET", "/resource_providers?required=CUSTOM_NOPE", "1.22", "")
	require.Equal(t, 400, status)
	require.Contains(t, rpErrDetail(t, body), "No such trait(s): CUSTOM_NOPE")
	status, _, _ = call(t, srv, "GET", "/resource_providers?required=in:CUSTOM_A,CUSTOM_B", "1.38", "")
	require.Equal(t, 400, status)
	require.Equal(t, []string{"one", "two"}, names("1.39", "?required=in:CUSTOM_B,CUSTOM_A"))
	require.Equal(t, []string{"one"}, names("1.39", "?required=in:CUSTOM_B,CUSTOM_A&required=!CUSTOM_B"))
	// Before 1.39 only the last "required" counts.
	require.Equal(t, []string{"two"}, names("1.22", "?required=CUSTOM_A&required=CUSTOM_B"))

	// Resources: without inventory nobody qualifies; bad forms are 400s.
	require.Empty(t, names("1.4", "?resources=VCPU:1"))
	for _, bad := range []string{"VCPU", "VCPU:x", "VCPU:0", "NOPE:1", ""} {
		status, _, _ = call(t, srv, "GET", "/resource_providers?resources="+bad, "1.4", "")
		require.Equal(t, 400, status, bad)
	}
	status, _, _ = call(t, srv, "GET", "/resource_providers?resources=VCPU:1", "1.3", "")
	require.Equal(t, 400, status)
}

func TestSchemaMessages(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	cases := map[string]string{
		`{}`:                           `'name' is a required property`,
		`{"name": 1}`:                  `1 is not of type 'string'`,
		`{"name": "x", "uuid": "bad"}`: `'bad' is not a 'uuid'`,
		`{"name": "x", "foo": 1}`:      `Additional properties are not allowed ('foo' was unexpected)`,
		`{"name": "x", "parent_provider_uuid": "bad"}`: `'bad' is not valid under any of the given schemas`,
	}
	for b, want := range cases {
		status, _, body := call(t, srv, "POST", "/resource_providers", "1.14", b)
		require.Equal(t, 400, status, b)
		first, _, _ := strings.Cut(rpErrDetail(t, body), "  Failed validating")
		require.Equal(t, "JSON does not validate: "+want, first, b)
	}
}

// TestSchemaMessagesAsPlacement: JSON Schema violations read as Placement
// 8.0's on one line (webob turns the line breaks of python-jsonschema's
// text into spaces; osc-placement shows only a detail's last line): here
// the text of the reference Placement's answers to the same requests,
// without webob's explanation and trailing spaces.
func TestSchemaMessagesAsPlacement(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	const rp = "11689ff8-ad59-456b-86b5-18582216f0c4"
	st, _, body := call(t, srv, "POST", "/resource_providers", "1.20", `{"name": "rp1", "uuid": "`+rp+`"}`)
	require.Equal(t, 200, st, body)
	for _, c := range []struct{ method, path, version, body, want string }{
		{"PUT", "/resource_providers/" + rp + "/aggregates", "1.1", `["abc", "efg"]`,
			"JSON does not validate: 'abc' is not a 'uuid'  Failed validating 'format' in schema['items']:     " +
				"{'format': 'uuid', 'type': 'string'}  On instance[0]:     'abc'"},
		{"PUT", "/resource_providers/" + rp + "/aggregates", "1.19", `{"aggregates": ["abc"], "resource_provider_generation": 0}`,
			"JSON does not validate: 'abc' is not a 'uuid'  Failed validating 'format' in schema['properties']['aggregates']['items']:     " +
				"{'format': 'uuid', 'type': 'string'}  On instance['aggregates'][0]:     'abc'"},
		{"POST", "/resource_classes", "1.2", `{"name": "fake_class"}`,
			"JSON does not validate: 'fake_class' does not match '^CUSTOM_[A-Z0-9_]+$'  Failed validating 'pattern' in schema['properties']['name']:     " +
				"{'maxLength': 255, 'pattern': '^CUSTOM_[A-Z0-9_]+$', 'type': 'string'}  On instance['name']:     'fake_class'"},
		{"POST", "/resource_providers", "1.20", `{"name": "x", "uuid": "abc"}`,
			"JSON does not validate: 'abc' is not a 'uuid'  Failed validating 'format' in schema['properties']['uuid']:     " +
				"{'format': 'uuid', 'type': 'string'}  On instance['uuid']:     'abc'"},
		{"PUT", "/resource_providers/" + rp + "/inventories", "1.39", `{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": "x"}}}`,
			"JSON does not validate: 'x' is not of type 'integer'  Failed validating 'type' in " +
				"schema['properties']['inventories']['patternProperties']['^[A-Z0-9_]+$']['properties']['total']:     " +
				"{'maximum': 2147483647, 'minimum': 1, 'type': 'integer'}  On instance['inventories']['VCPU']['total']:     'x'"},
		{"PUT", "/allocations/" + rp, "1.39", `{"allocations": {"` + rp + `": {"resources": {"VCPU": 0}}}, "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"}`,
			"JSON does not validate: 0 is less than the minimum of 1  Failed validating 'minimum' in " +
				"schema['properties']['allocations']['patternProperties']['^[0-9a-fA-F-]{36}$']['properties']['resources']['patternProperties']['^[A-Z0-9_]+$']:     " +
				"{'minimum': 1, 'type': 'integer'}  On instance['allocations']['" + rp + "']['resources']['VCPU']:     0"},
		{"GET", "/resource_providers?uuid=abc", "1.39", "",
			"Invalid query string parameters: 'abc' is not a 'uuid'  Failed validating 'format' in schema['properties']['uuid']:     " +
				"{'format': 'uuid', 'type': 'string'}  On instance['uuid']:     'abc'"},
	} {
		st, _, body := call(t, srv, c.method, c.path, c.version, c.body)
		require.Equal(t, 400, st, c.path)
		require.Equal(t, c.want, rpErrDetail(t, body), "%s %s", c.method, c.path)
	}
	// The plain-text body too.
	st, _, text := callRaw(t, srv, "PUT", "/resource_providers/"+rp+"/aggregates", map[string]string{
		"Content-Type": "application/json", "Accept": "text/plain", "OpenStack-API-Version": "placement 1.1"}, `["abc"]`)
	require.Equal(t, 400, st)
	require.Equal(t, "400 Bad Request\n\nJSON does not validate: 'abc' is not a 'uuid'  Failed validating 'format' in schema['items']:     "+
		"{'format': 'uuid', 'type': 'string'}  On instance[0]:     'abc'", text)
}

// TestProviderCreateNameAndUUIDSpelling: an empty name is 400 (Placement's
// object refuses it though the schema allows it); a uuid in any spelling
// oslo's is_uuid_like takes (here without dashes) is accepted and stored
// canonically.
func TestProviderCreateNameAndUUIDSpelling(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	st, _, body := call(t, srv, "POST", "/resource_providers", "1.39", `{"name": ""}`)
	require.Equal(t, 400, st)
	require.Contains(t, rpErrDetail(t, body), "name is required")

	st, _, body = call(t, srv, "POST", "/resource_providers", "1.39",
		`{"name": "nodash", "uuid": "`+strings.ReplaceAll(rpU3, "-", "")+`"}`)
	require.Equal(t, 200, st, body)
	require.Equal(t, rpU3, body["uuid"])
	st, _, _ = call(t, srv, "GET", "/resource_providers/"+rpU3, "1.39", "")
	require.Equal(t, 200, st)
	st, _, _ = call(t, srv, "POST", "/resource_providers", "1.39", `{"name": "bad", "uuid": "not-a-uuid"}`)
	require.Equal(t, 400, st)
}
