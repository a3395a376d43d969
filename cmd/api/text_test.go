package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

// TestNonTextBodiesRefused: a JSON body with bytes that are not UTF-8, or a
// \u escape of a lone surrogate (which Go's decoder would store as U+FFFD),
// is a 400 in Ironic's format on every route that takes a body (creates,
// JSON Patch updates, PUTs), wherever the bad text sits (extra, a name, a
// key), and nothing is stored.
func TestNonTextBodiesRefused(t *testing.T) {
	t.Parallel()
	pool, srv := noauthAPI(t, nil)
	dbtest.Conductor(t, pool, "conductor-1", 0, true)
	hdr := []string{"Content-Type", "application/json", web.IronicVersionHeader, "1.82"}
	create := func(path, body string) string {
		st, _, raw := webtest.Do(t, http.MethodPost, srv.URL+path, body, hdr...)
		require.Equal(t, http.StatusCreated, st, string(raw))
		var doc struct{ UUID string }
		require.NoError(t, json.Unmarshal(raw, &doc))
		return doc.UUID
	}
	node := create("/v1/nodes", `{"driver": "fake-hardware", "name": "n1"}`)
	alloc := create("/v1/allocations", `{"resource_class": "gold"}`)
	group := create("/v1/allocation_groups", `{"count": 2, "resource_class": "gold"}`)
	chassis := create("/v1/chassis", `{"description": "c"}`)

	// X marks where the bad text goes.
	routes := [][3]string{
		{"POST", "/v1/allocations", `{"resource_class": "gold", "extra": {"k": "X"}}`},
		{"POST", "/v1/allocations", `{"resource_class": "gold", "extra": {"X": 1}}`},
		{"POST", "/v1/allocations", `{"resource_class": "gold", "name": "X"}`},
		{"PATCH", "/v1/allocations/" + alloc, `[{"op": "add", "path": "/extra/k", "value": "X"}]`},
		{"POST", "/v1/allocation_groups", `{"count": 1, "resource_class": "gold", "extra": {"k": "X"}}`},
		{"PATCH", "/v1/allocation_groups/" + group, `[{"op": "add", "path": "/extra/k", "value": "X"}]`},
		{"POST", "/v1/nodes", `{"driver": "fake-hardware", "extra": {"k": "X"}}`},
		{"PATCH", "/v1/nodes/" + node, `[{"op": "add", "path": "/extra/k", "value": "X"}]`},
		{"PATCH", "/v1/nodes/" + node, `[{"op": "replace", "path": "/description", "value": "X"}]`},
		{"PUT", "/v1/nodes/" + node + "/maintenance", `{"reason": "X"}`},
		{"PUT", "/v1/nodes/" + node + "/traits", `{"traits": ["CUSTOM_X"]}`},
		{"POST", "/v1/chassis", `{"description": "X"}`},
		{"PATCH", "/v1/chassis/" + chassis, `[{"op": "add", "path": "/extra/k", "value": "X"}]`},
		{"POST", "/v1/ports", `{"node_uuid": "` + node + `", "address": "52:54:00:00:00:01", "extra": {"k": "X"}}`},
		{"PUT", "/v1/topology", `{"levels": [{"name": "X", "source": "extra.rack"}]}`},
	}
	snapshot := func() string {
		var s string
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT concat_ws('|',
			(SELECT string_agg(x::text, ',' ORDER BY x::text) FROM nodes x),
			(SELECT string_agg(x::text, ',' ORDER BY x::text) FROM allocations x),
			(SELECT string_agg(x::text, ',' ORDER BY x::text) FROM allocation_groups x),
			(SELECT string_agg(x::text, ',' ORDER BY x::text) FROM chassis x),
			(SELECT count(*) FROM ports))`).Scan(&s))
		return s
	}
	before := snapshot()
	webtest.SendNonText(t, srv.URL, routes, func(raw []byte, problem string) {
		fault := web.IronicFaultString(raw)
		require.True(t, strings.HasPrefix(fault, "Invalid JSON in request body: "+problem), fault)
	}, hdr...)
	after := snapshot()
	require.Equal(t, before, after, "nothing stored")
	require.NotContains(t, after, "\ufffd")

	// Text passes: a surrogate pair is one character.
	st, _, raw := webtest.Do(t, http.MethodPost, srv.URL+"/v1/allocations",
		`{"resource_class": "gold", "extra": {"k": "\ud83d\ude00 é"}}`, hdr...)
	require.Equal(t, http.StatusCreated, st, string(raw))
	require.Contains(t, string(raw), `"extra":{"k":"😀 é"}`)
}
