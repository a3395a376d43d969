package placement

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/trait"
)

func TestTraits(t *testing.T) {
	t.Parallel()
	srv, pool := rpTestServer(t)

	// Standard traits are synced, idempotently.
	require.NoError(t, Prepare(t.Context(), pool))
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM placement.traits").Scan(&n))
	require.Equal(t, len(trait.Standard()), n)

	status, _, _ := call(t, srv, "GET", "/traits", "1.5", "")
	require.Equal(t, 404, status)
	status, h, body := call(t, srv, "GET", "/traits", "1.6", "")
	require.Equal(t, 200, status)
	require.Len(t, body["traits"], n)
	require.Empty(t, h.Get("Last-Modified"))

	// PUT creates custom traits only.
	status, h, _ = call(t, srv, "PUT", "/traits/CUSTOM_FOO", "1.6", "")
	require.Equal(t, 201, status)
	require.Equal(t, srv.URL+"/traits/CUSTOM_FOO", h.Get("Location"))
	status, h, _ = call(t, srv, "PUT", "/traits/CUSTOM_FOO", "1.15", "")
	require.Equal(t, 204, status)
	require.NotEmpty(t, h.Get("Last-Modified"))
	status, _, body = call(t, srv, "PUT", "/traits/FOO", "1.6", "")
	require.Equal(t, 400, status)
	require.Contains(t, rpErrDetail(t, body), "The trait is invalid")
	status, _, _ = call(t, srv, "PUT", "/traits/CUSTOM_BAR", "1.6", "")
	require.Equal(t, 201, status)

	// GET one.
	status, _, _ = call(t, srv, "GET", "/traits/CUSTOM_FOO", "1.6", "")
	require.Equal(t, 204, status)
	status, _, _ = call(t, srv, "GET", "/traits/HW_CPU_X86_AVX", "1.6", "")
	require.Equal(t, 204, status)
	status, _, body = call(t, srv, "GET", "/traits/CUSTOM_NOPE", "1.6", "")
	require.Equal(t, 404, status)
	require.Contains(t, rpErrDetail(t, body), "No such trait(s): CUSTOM_NOPE.")

	// Filters.
	list := func(query string) []any {
		t.Helper()
		status, _, body := call(t, srv, "GET", "/traits"+query, "1.6", "")
		require.Equal(t, 200, status, "%s %v", query, body)
		return body["traits"].([]any)
	}
	require.Equal(t, []any{"CUSTOM_BAR", "CUSTOM_FOO"}, list("?name=startswith:CUSTOM_"))
	require.Equal(t, []any{"CUSTOM_FOO", "HW_CPU_X86_AVX"}, list("?name=in:HW_CPU_X86_AVX,CUSTOM_FOO,CUSTOM_NOPE"))
	require.Empty(t, list("?associated=true"))
	for _, bad := range []string{"?name=CUSTOM_FOO", "?associated=maybe", "?x=1"} {
		status, _, _ = call(t, srv, "GET", "/traits"+bad, "1.6", "")
		require.Equal(t, 400, status, bad)
	}

	// Provider traits.
	rpCreate(t, srv, "p", rpU1, "")
	status, _, body = call(t, srv, "GET", "/resource_providers/"+rpU1+"/traits", "1.6", "")
	require.Equal(t, 200, status)
	require.Empty(t, body["traits"])
	require.EqualValues(t, 0, body["resource_provider_generation"])
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU1+"/traits", "1.6",
		`{"traits": ["CUSTOM_FOO", "HW_CPU_X86_AVX"], "resource_provider_generation": 0}`)
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, []any{"CUSTOM_FOO", "HW_CPU_X86_AVX"}, body["traits"])
	require.EqualValues(t, 1, body["resource_provider_generation"])
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU1+"/traits", "1.23",
		`{"traits": ["CUSTOM_BAR"], "resource_provider_generation": 0}`)
	require.Equal(t, 409, status)
	require.Equal(t, "placement.concurrent_update", rpErrCode(t, body))
	status, _, body = call(t, srv, "PUT", "/resource_providers/"+rpU1+"/traits", "1.6",
		`{"traits": ["CUSTOM_NOPE"], "resource_provider_generation": 1}`)
	require.Equal(t, 400, status)
	require.Contains(t, rpErrDetail(t, body), "No such trait CUSTOM_NOPE")
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU1+"/traits", "1.6", `{"traits": []}`)
	require.Equal(t, 400, status)
	status, _, _ = call(t, srv, "PUT", "/resource_providers/"+rpU2+"/traits", "1.6",
		`{"traits": [], "resource_provider_generation": 0}`)
	require.Equal(t, 404, status)
	status, _, _ = call(t, srv, "GET", "/resource_providers/"+rpU2+"/traits", "1.6", "")
	require.Equal(t, 404, status)
	status, _, _ = call(t, srv, "GET", "/resource_providers/"+rpU1+"/traits", "1.5", "")
	require.Equal(t, 404, status)
	status, h, body = call(t, srv, "GET", "/resource_providers/"+rpU1+"/traits", "1.15", "")
	require.Equal(t, 200, status)
	require.Len(t, body["traits"], 2)
	require.NotEmpty(t, h.Get("Last-Modified"))
	require.Equal(t, []any{"CUSTOM_FOO", "HW_CPU_X86_AVX"}, list("?associated=true"))
	require.NotContains(t, list("?associated=false"), "CUSTOM_FOO")

	// Deleting traits.
	status, _, _ = call(t, srv, "DELETE", "/traits/HW_CPU_X86_SSE", "1.6", "")
	require.Equal(t, 400, status)
	status, _, _ = call(t, srv, "DELETE", "/traits/CUSTOM_FOO", "1.6", "")
	require.Equal(t, 409, status)
	status, _, _ = call(t, srv, "DELETE", "/traits/CUSTOM_NOPE", "1.6", "")
	require.Equal(t, 404, status)
	status, _, _ = call(t, srv, "DELETE", "/resource_providers/"+rpU1+"/traits", "1.6", "")
	require.Equal(t, 204, status)
	_, _, body = call(t, srv, "GET", "/resource_providers/"+rpU1+"/traits", "1.6", "")
	require.Empty(t, body["traits"])
	require.EqualValues(t, 2, body["resource_provider_generation"])
	status, _, _ = call(t, srv, "DELETE", "/traits/CUSTOM_FOO", "1.6", "")
	require.Equal(t, 204, status)
	status, _, _ = call(t, srv, "GET", "/traits/CUSTOM_FOO", "1.6", "")
	require.Equal(t, 404, status)
}

// TestProviderTraitsGenerationOnlyOnChange: as Placement's set_traits,
// setting the traits a provider has already, or deleting the traits of a
// provider that has none, leaves its generation alone.
func TestProviderTraitsGenerationOnlyOnChange(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	rpCreate(t, srv, "tg", rpU1, "")
	path := "/resource_providers/" + rpU1 + "/traits"
	st, _, body := call(t, srv, "PUT", path, "1.6", `{"traits": ["HW_CPU_X86_AVX"], "resource_provider_generation": 0}`)
	require.Equal(t, 200, st, body)
	require.EqualValues(t, 1, body["resource_provider_generation"])
	st, _, body = call(t, srv, "PUT", path, "1.6", `{"traits": ["HW_CPU_X86_AVX"], "resource_provider_generation": 1}`)
	require.Equal(t, 200, st, body)
	require.EqualValues(t, 1, body["resource_provider_generation"], "same set: no bump")
	st, _, _ = call(t, srv, "DELETE", path, "1.6", "")
	require.Equal(t, 204, st)
	st, _, _ = call(t, srv, "DELETE", path, "1.6", "")
	require.Equal(t, 204, st)
	_, _, body = call(t, srv, "GET", path, "1.6", "")
	require.EqualValues(t, 2, body["resource_provider_generation"], "second delete: no bump")
}
