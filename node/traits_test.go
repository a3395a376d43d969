package node_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestTraits(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.createNode(map[string]any{"name": "tr"})["uuid"].(string)
	base := "/v1/nodes/tr/traits"
	get := func() []any {
		return e.must(http.StatusOK, http.MethodGet, base, "1.37", nil).body["traits"].([]any)
	}
	require.Equal(t, []any{}, get())

	r := e.must(http.StatusNoContent, http.MethodPut, base, "1.37", map[string]any{"traits": []string{"CUSTOM_B", "HW_CPU_X86_AVX2", "CUSTOM_B"}})
	require.Empty(t, r.raw)
	require.Equal(t, []any{"CUSTOM_B", "HW_CPU_X86_AVX2"}, get())
	r = e.must(http.StatusNoContent, http.MethodPut, base+"/CUSTOM_A", "1.37", nil)
	require.Equal(t, "http://metalloc.test:6385/v1/nodes/tr/traits/CUSTOM_A", r.header.Get("Location"))
	e.must(http.StatusNoContent, http.MethodPut, base+"/CUSTOM_A", "1.37", nil) // idempotent
	require.Equal(t, []any{"CUSTOM_A", "CUSTOM_B", "HW_CPU_X86_AVX2"}, get())
	// Node detail shows traits from 1.37.
	require.Equal(t, []any{"CUSTOM_A", "CUSTOM_B", "HW_CPU_X86_AVX2"}, e.getNode(id)["traits"])
	require.NotContains(t, e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+id, "1.36", nil).body, "traits")

	e.must(http.StatusNoContent, http.MethodDelete, base+"/CUSTOM_B", "1.37", nil)
	require.Equal(t, []any{"CUSTOM_A", "HW_CPU_X86_AVX2"}, get())
	r = e.must(http.StatusNotFound, http.MethodDelete, base+"/CUSTOM_B", "1.37", nil)
	require.Equal(t, "Node "+id+" doesn't have a trait 'CUSTOM_B'", r.fault(t))
	e.must(http.StatusNoContent, http.MethodDelete, base, "1.37", nil)
	require.Equal(t, []any{}, get())
	e.must(http.StatusNoContent, http.MethodPut, base, "1.37", map[string]any{"traits": []string{"CUSTOM_Z"}})
	e.must(http.StatusNoContent, http.MethodPut, base, "1.37", map[string]any{"traits": []string{}})
	require.Equal(t, []any{}, get())

	// Invalid traits.
	r = e.must(http.StatusBadRequest, http.MethodPut, base+"/custom_lower", "1.37", nil)
	require.Equal(t, "Schema error for trait: 'custom_lower' is not valid under any of the given schemas. Possible root cause: 'custom_lower' does not match '^CUSTOM_[A-Z0-9_]+$'", r.fault(t))
	r = e.must(http.StatusBadRequest, http.MethodPut, base, "1.37", map[string]any{"traits": []string{"CUSTOM_OK", "NOT_A_TRAIT"}})
	require.Equal(t, "Schema error for body: 'NOT_A_TRAIT' is not valid under any of the given schemas. Possible root cause: 'NOT_A_TRAIT' does not match '^CUSTOM_[A-Z0-9_]+$'", r.fault(t))
	long := "CUSTOM_" + strings.Repeat("X", 250)
	r = e.must(http.StatusBadRequest, http.MethodPut, base+"/"+long, "1.37", nil)
	require.Equal(t, "Schema error for trait: '"+long+"' is too long", r.fault(t))
	r = e.must(http.StatusBadRequest, http.MethodPut, base, "1.37", map[string]any{"traits": "CUSTOM_A"})
	require.Equal(t, "Schema error for body: 'CUSTOM_A' is not of type 'array'", r.fault(t))
	r = e.must(http.StatusBadRequest, http.MethodPut, base, "1.37", map[string]any{"trait": []string{}})
	require.Equal(t, "Schema error for body: Additional properties are not allowed ('trait' was unexpected)", r.fault(t))
	r = e.must(http.StatusBadRequest, http.MethodPut, base, "1.37", nil)
	require.Contains(t, r.fault(t), "A single node trait may be added via PUT /v1/nodes/<node identifier>/traits/<trait> with no body")
	r = e.must(http.StatusBadRequest, http.MethodPut, base+"/CUSTOM_A", "1.37", map[string]any{"traits": []string{}})
	require.Contains(t, r.fault(t), "A single node trait may be added")
	r = e.must(http.StatusBadRequest, http.MethodPut, base+"/CUSTOM_A", "1.37", map[string]any{"x": 1})
	require.Contains(t, r.fault(t), "Additional properties are not allowed")
	require.Equal(t, []any{}, get())

	// At most 50.
	var fifty []string
	for i := range 50 {
		fifty = append(fifty, fmt.Sprintf("CUSTOM_T%02d", i))
	}
	e.must(http.StatusNoContent, http.MethodPut, base, "1.37", map[string]any{"traits": fifty})
	r = e.must(http.StatusBadRequest, http.MethodPut, base+"/CUSTOM_ONE_MORE", "1.37", nil)
	require.Equal(t, "Could not modify traits for node "+id+" as it would exceed the maximum number of traits per node (51 vs. 50)", r.fault(t))
	r = e.must(http.StatusBadRequest, http.MethodPut, base, "1.37", map[string]any{"traits": append(fifty, "CUSTOM_ONE_MORE")})
	require.Contains(t, r.fault(t), "(51 vs. 50)")
	require.Len(t, get(), 50)

	// Before 1.37 the endpoints do not exist (with Ironic's statuses).
	e.must(http.StatusNotAcceptable, http.MethodGet, base, "1.36", nil)
	e.must(http.StatusMethodNotAllowed, http.MethodPut, base+"/CUSTOM_A", "1.36", nil)
	e.must(http.StatusNotFound, http.MethodDelete, base+"/CUSTOM_T01", "1.36", nil)
	require.Len(t, get(), 50)
	missing := uuid.NewString()
	r = e.must(http.StatusNotFound, http.MethodGet, "/v1/nodes/"+missing+"/traits", "1.37", nil)
	require.Equal(t, "Node "+missing+" could not be found.", r.fault(t))
}
