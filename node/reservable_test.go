package node_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/node"
)

// TestReservable: the node field reservable (leases, issue 43) is shown at
// every microversion, set by JSON PATCH (a boolean, else 400), by import
// (new and existing nodes; absent: kept) and by SetReservable (the CLI),
// all or nothing.
func TestReservable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	id := e.createNode(map[string]any{"name": "res-1"})["uuid"].(string)
	require.Equal(t, false, e.must(http.StatusOK, http.MethodGet, "/v1/nodes/"+id, "1.1", nil).body["reservable"])

	b := e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/res-1", "1.82", []op{
		{"op": "replace", "path": "/reservable", "value": true}}).body
	require.Equal(t, true, b["reservable"])
	n, err := e.store.Get(ctx, id)
	require.NoError(t, err)
	require.True(t, n.Reservable)
	r := e.do(http.MethodPatch, "/v1/nodes/res-1", "1.82", []op{{"op": "replace", "path": "/reservable", "value": "yes"}})
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.fault(t), "'yes' is not of type 'boolean'")
	// The refusal of an unknown field keeps Ironic's list.
	r = e.do(http.MethodPatch, "/v1/nodes/res-1", "1.82", []op{{"op": "replace", "path": "/uuid", "value": id}})
	require.Equal(t, http.StatusBadRequest, r.status)
	require.NotContains(t, r.fault(t), "reservable")
	b = e.must(http.StatusOK, http.MethodPatch, "/v1/nodes/res-1", "1.82", []op{{"op": "remove", "path": "/reservable"}}).body
	require.Equal(t, false, b["reservable"])
	require.Equal(t, false, e.must(http.StatusOK, http.MethodGet, "/v1/nodes/res-1?fields=reservable", "1.82", nil).body["reservable"])

	// Import: new nodes (COPY) and an existing one; absent keeps the value.
	file := `{"nodes": [{"name": "res-1", "driver": "fake-hardware", "reservable": true},
		{"name": "res-2", "driver": "fake-hardware", "reservable": true},
		{"name": "res-3", "driver": "fake-hardware"}]}`
	_, err = node.Import(ctx, e.store, strings.NewReader(file), node.ImportOptions{}, nil)
	require.NoError(t, err)
	for name, want := range map[string]bool{"res-1": true, "res-2": true, "res-3": false} {
		n, err := e.store.Get(ctx, name)
		require.NoError(t, err)
		require.Equal(t, want, n.Reservable, name)
	}
	_, err = node.Import(ctx, e.store, strings.NewReader(`{"nodes": [{"name": "res-1", "driver": "fake-hardware"}]}`), node.ImportOptions{}, nil)
	require.NoError(t, err)
	n, err = e.store.Get(ctx, "res-1")
	require.NoError(t, err)
	require.True(t, n.Reservable)
	_, err = node.Import(ctx, e.store, strings.NewReader(`{"nodes": [{"name": "res-4", "driver": "fake-hardware", "reservable": "yes"}]}`), node.ImportOptions{}, nil)
	require.ErrorContains(t, err, "reservable must be true or false")

	// SetReservable: by name and uuid; an unknown ident changes nothing.
	got, err := e.store.SetReservable(ctx, []string{"res-3", id}, false)
	require.NoError(t, err)
	require.Equal(t, 2, got)
	_, err = e.store.SetReservable(ctx, []string{"res-3", "no-such-node"}, true)
	require.ErrorIs(t, err, node.ErrNotFound)
	require.ErrorContains(t, err, "no-such-node")
	n, err = e.store.Get(ctx, "res-3")
	require.NoError(t, err)
	require.False(t, n.Reservable)
}
