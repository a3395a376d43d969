package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBadInputNeverServerError throws malformed bodies, parameters and
// identifiers at every endpoint of a running metalloc-api: every answer must
// be a 4xx in Ironic's error format (never a 5xx), and nothing may change.
func TestBadInputNeverServerError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stack, client := startStack(t, 1)
	sample := loadSample(t)[:3]
	enroll(t, ctx, client, sample)
	node := sample[0].Name

	bodies := []string{"", "{", "[]", "null", "1", `"x"`, `{"a":1}`, "\xff\xfe", `{"resource_class": 5}`,
		`{"resource_class": "x", "traits": "CUSTOM_A"}`, `{"resource_class": "x", "traits": [1]}`,
		`{"resource_class": "x", "candidate_nodes": {}}`, `{"resource_class": "x", "extra": []}`,
		`{"resource_class": "` + strings.Repeat("a", 10000) + `"}`, strings.Repeat("[", 5000),
		`[{"op": "replace", "path": "/name"}]`, `[{"op": "bogus", "path": "/x", "value": 1}]`,
		`[{"op": "replace", "path": "", "value": 1}]`, `[{"op": "add", "path": "/extra/a/b/c", "value": 1}]`,
		`{"target": "bogus"}`, `{"target": null}`, `{"traits": [null]}`, `{"reason": 5}`,
		// Values PostgreSQL or Go's JSON decoding refuse: the answer says
		// so in Ironic's words, not theirs.
		`{"resource_class": "x\u0000"}`, `{"resource_class": "x", "extra": {"a": 1e400}}`,
		`{"driver": "fake-hardware", "name": "n", "extra": {"k\u0000": 1}}`, `{"driver": "fake-hardware", "description": "a\u0000"}`,
		`{"driver": "fake-hardware", "properties": {"cpus": 1e400}}`, `[{"op": "add", "path": "/extra/a", "value": 1e400}]`,
		`[{"op": "add", "path": "/extra/a", "value": "\u0000"}]`, `{"reason": "\u0000"}`}
	type ep struct{ method, path string }
	withBody := []ep{
		{"POST", "/v1/allocations"}, {"PATCH", "/v1/allocations/x"},
		{"POST", "/v1/nodes"}, {"PATCH", "/v1/nodes/" + node},
		{"PUT", "/v1/nodes/" + node + "/states/provision"}, {"PUT", "/v1/nodes/" + node + "/states/power"},
		{"PUT", "/v1/nodes/" + node + "/traits"}, {"PUT", "/v1/nodes/" + node + "/maintenance"},
		{"PUT", "/v1/nodes/" + node + "/states/raid"}, {"PUT", "/v1/nodes/" + node + "/states/console"},
		{"PUT", "/v1/nodes/" + node + "/management/boot_device"}, {"POST", "/v1/nodes/" + node + "/vendor_passthru?method=x"},
	}
	queries := []string{"limit=-1", "limit=abc", "limit=99999999999999999999", "marker=zzz",
		"marker=00000000-0000-0000-0000-000000000000", "sort_key=;drop", "sort_dir=sideways",
		"fields=uuid,nope", "fields=", "node=%00", "state=%ff", "maintenance=maybe", "associated=2",
		"resource_class=" + strings.Repeat("x", 5000), "detail=x", "provision_state=%27"}
	gets := []string{"/v1/allocations", "/v1/nodes", "/v1/nodes/detail"}
	idents := []string{"%00", strings.Repeat("z", 3000), "..", "a%2Fb", "%ff%fe", "00000000-0000-0000-0000-000000000000"}

	count := func() (n int) {
		for _, p := range []string{"/v1/allocations?fields=uuid", "/v1/nodes?fields=uuid"} {
			code, body := send(t, "GET", stack.APIURL+p, "")
			require.Equal(t, 200, code, body)
			var doc map[string][]any
			require.NoError(t, json.Unmarshal([]byte(body), &doc))
			for _, v := range doc {
				n += len(v)
			}
		}
		return n
	}
	before := count()
	check := func(method, url, body string) {
		code, resp := send(t, method, url, body)
		require.Less(t, code, 500, "%s %s %q -> %d %s", method, url, trunc(body), code, resp)
		if code >= 400 && method != "HEAD" {
			var doc struct {
				ErrorMessage string `json:"error_message"`
			}
			require.NoError(t, json.Unmarshal([]byte(resp), &doc), "%s %s: %s", method, url, resp)
			var fault struct{ Faultstring, Faultcode string }
			require.NoError(t, json.Unmarshal([]byte(doc.ErrorMessage), &fault), resp)
			require.Equal(t, "Client", fault.Faultcode)
			for _, internal := range internals {
				require.NotContains(t, fault.Faultstring, internal, "%s %s %q", method, url, trunc(body))
			}
		}
	}
	for _, e := range withBody {
		for _, b := range bodies {
			check(e.method, stack.APIURL+e.path, b)
		}
	}
	for _, g := range gets {
		for _, q := range queries {
			check("GET", stack.APIURL+g+"?"+q, "")
		}
	}
	for _, id := range idents {
		for _, p := range []string{"/v1/nodes/%s", "/v1/allocations/%s", "/v1/nodes/%s/allocation",
			"/v1/nodes/%s/states", "/v1/nodes/%s/traits", "/v1/nodes/%s/bios", "/v1/nodes/%s/firmware",
			"/v1/nodes/%s/management/boot_device"} {
			check("GET", stack.APIURL+fmt.Sprintf(p, id), "")
		}
		check("DELETE", stack.APIURL+"/v1/allocations/"+id, "")
		check("PUT", stack.APIURL+"/v1/nodes/"+node+"/traits/"+id, "")
	}
	require.Equal(t, before, count(), "rejected requests must not create or delete anything")
}

// internals are texts of PostgreSQL's and Go's own errors that no client
// should read in a 4xx answer.
var internals = []string{"Go value", "Go struct", "of type float64", "of type int", "invalid byte sequence",
	"unsupported Unicode escape", "SQLSTATE", "encoding \"UTF8\"", "json: ", "pgx", "pgconn"}

func send(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
