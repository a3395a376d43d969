package placement

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAggregates(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	rpCreate(t, srv, "p", rpU1, "")
	aggA, aggB := "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa", "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"
	path := "/resource_providers/" + rpU1 + "/aggregates"

	status, _, _ := call(t, srv, "GET", path, "1.0", "")
	require.Equal(t, 404, status)
	status, h, body := call(t, srv, "GET", path, "1.1", "")
	require.Equal(t, 200, status)
	require.Equal(t, []any{}, body["aggregates"])
	require.NotContains(t, body, "resource_provider_generation")
	require.Empty(t, h.Get("Last-Modified"))

	// Before 1.19: a bare list, no generation change.
	status, _, body = call(t, srv, "PUT", path, "1.1", `["`+aggA+`", "`+aggB+`"]`)
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, []any{aggA, aggB}, body["aggregates"])
	_, h, body = call(t, srv, "GET", path, "1.19", "")
	require.EqualValues(t, 0, body["resource_provider_generation"])
	require.Len(t, body["aggregates"], 2)
	require.NotEmpty(t, h.Get("Last-Modified"))
	for _, bad := range []string{`["nope"]`, `["` + aggA + `", "` + aggA + `"]`, `{"aggregates": []}`} {
		status, _, body = call(t, srv, "PUT", path, "1.18", bad)
		require.Equal(t, 400, status, bad)
		require.Contains(t, rpErrDetail(t, body), "JSON does not validate")
	}

	// From 1.19: object with the generation, which is checked and bumped.
	status, _, _ = call(t, srv, "PUT", path, "1.19", `["`+aggA+`"]`)
	require.Equal(t, 400, status)
	status, _, _ = call(t, srv, "PUT", path, "1.19", `{"aggregates": ["`+aggA+`"]}`)
	require.Equal(t, 400, status)
	status, _, body = call(t, srv, "PUT", path, "1.19", `{"aggregates": ["`+aggA+`"], "resource_provider_generation": 0}`)
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, []any{aggA}, body["aggregates"])
	require.EqualValues(t, 1, body["resource_provider_generation"])
	status, _, body = call(t, srv, "PUT", path, "1.23", `{"aggregates": [], "resource_provider_generation": 0}`)
	require.Equal(t, 409, status)
	require.Equal(t, "placement.concurrent_update", rpErrCode(t, body))
	status, _, body = call(t, srv, "PUT", path, "1.19", `{"aggregates": [], "resource_provider_generation": 1}`)
	require.Equal(t, 200, status)
	require.Equal(t, []any{}, body["aggregates"])
	require.EqualValues(t, 2, body["resource_provider_generation"])
	_, _, body = call(t, srv, "GET", "/resource_providers/"+rpU1, "1.19", "")
	require.EqualValues(t, 2, body["generation"])

	// Unknown provider, wrong media type.
	status, _, _ = call(t, srv, "GET", "/resource_providers/"+rpU2+"/aggregates", "1.1", "")
	require.Equal(t, 404, status)
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU2+"/aggregates", "1.1", `[]`)
	require.Equal(t, 404, status)
	status, _, _ = call(t, srv, "PUT", path, "1.1", "")
	require.Equal(t, 415, status)
}
