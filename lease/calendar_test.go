package lease_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCalendar reads the lease calendar (GET /v1/ui/leases) of a small
// hand-checked fleet: rack 1/r01 (gpu-1, gpu-2) and 2/r02 (gpu-3, gpu-4,
// gpu-4 in maintenance); lease a (p1) holds both nodes of r01 over
// [0 h, 10 h), lease b (p2) gpu-3 over [5 h, 8 h). In 4-hour cells over
// [0, 12) h, a holds 2 nodes in every cell of r01 (the last one partly),
// b one node of r02 in [4, 8); free counts nodes held at no moment of the
// cell and out of maintenance. A cancelled lease holds nothing.
func TestCalendar(t *testing.T) {
	pool := fleet(t, 2, 2)
	srv := server(t, pool)
	_, err := pool.Exec(context.Background(), `UPDATE nodes SET maintenance = true WHERE name = 'gpu-4'`)
	require.NoError(t, err)
	st, a := do(t, srv, "POST", "/v1/leases", leaseBody("a", 0, 10, 2, `,"required":"rack"`))
	require.Equal(t, 201, st, "%v", a)
	require.Equal(t, "1/r01", a["reservations"].([]any)[0].(map[string]any)["domain"], "the rack with the most free nodes")
	st, b := do(t, srv, "POST", "/v1/leases", `{"name":"b","project_id":"p2","start_time":"`+at(5)+`","end_time":"`+at(8)+`",
		"reservations":[{"resource_class":"gpu","count":1}]}`)
	require.Equal(t, 201, st, "%v", b)

	st, doc := do(t, srv, "GET", "/v1/ui/leases?step=4h&after="+at(0)+"&until="+at(12), "")
	require.Equal(t, 200, st, "%v", doc)
	require.Equal(t, at(0), doc["now"])
	require.Equal(t, at(0), doc["after"])
	require.Equal(t, at(12), doc["until"])
	require.Equal(t, float64(14400), doc["step"])
	require.Equal(t, "rack", doc["level"], "the finest level by default")
	require.Equal(t, []any{"row", "rack"}, doc["levels"])
	leases, _ := json.Marshal(doc["leases"])
	require.JSONEq(t, `[
		{"uuid":"`+a["uuid"].(string)+`","name":"a","project_id":"p1","state":"pending","on_start":"allocate",
		 "start_time":"`+at(0)+`","end_time":"`+at(10)+`","nodes":2},
		{"uuid":"`+b["uuid"].(string)+`","name":"b","project_id":"p2","state":"pending","on_start":"allocate",
		 "start_time":"`+at(5)+`","end_time":"`+at(8)+`","nodes":1}]`, string(leases))
	rows, _ := json.Marshal(doc["rows"])
	require.JSONEq(t, `[
		{"domain":"1/r01","total":2,"maintenance":0,"classes":{"gpu":2},"cells":[
			{"free":0,"leases":[{"lease":0,"nodes":2}],"hidden":0},
			{"free":0,"leases":[{"lease":0,"nodes":2}],"hidden":0},
			{"free":0,"leases":[{"lease":0,"nodes":2}],"hidden":0}]},
		{"domain":"2/r02","total":2,"maintenance":1,"classes":{"gpu":2},"cells":[
			{"free":1,"leases":[],"hidden":0},
			{"free":0,"leases":[{"lease":1,"nodes":1}],"hidden":0},
			{"free":1,"leases":[],"hidden":0}]}]`, string(rows))

	// Rows of another level; a class with no reservable node: no rows.
	_, doc = do(t, srv, "GET", "/v1/ui/leases?level=row&step=12h&after="+at(0)+"&until="+at(12), "")
	rows, _ = json.Marshal(doc["rows"])
	require.JSONEq(t, `[
		{"domain":"1","total":2,"maintenance":0,"classes":{"gpu":2},"cells":[{"free":0,"leases":[{"lease":0,"nodes":2}],"hidden":0}]},
		{"domain":"2","total":2,"maintenance":1,"classes":{"gpu":2},"cells":[{"free":0,"leases":[{"lease":1,"nodes":1}],"hidden":0}]}]`,
		string(rows))
	_, doc = do(t, srv, "GET", "/v1/ui/leases?resource_class=gold", "")
	require.Equal(t, []any{}, doc["rows"])
	require.Equal(t, "gold", doc["resource_class"])

	// Defaults: a week in 6-hour cells from the current block (the
	// clock is at 09:00 UTC: from 06:00).
	st, doc = do(t, srv, "GET", "/v1/ui/leases", "")
	require.Equal(t, 200, st, "%v", doc)
	require.Equal(t, at(-3), doc["after"])
	require.Equal(t, at(-3+7*24), doc["until"])
	require.Len(t, doc["rows"].([]any)[0].(map[string]any)["cells"], 28)

	// Cancelled: b holds nothing any more.
	st, _ = do(t, srv, "POST", "/v1/leases/b/cancel", "")
	require.Equal(t, 200, st)
	_, doc = do(t, srv, "GET", "/v1/ui/leases?step=4h&after="+at(0)+"&until="+at(12), "")
	require.Len(t, doc["leases"], 1)
	cell := doc["rows"].([]any)[1].(map[string]any)["cells"].([]any)[1]
	require.Equal(t, map[string]any{"free": float64(1), "leases": []any{}, "hidden": float64(0)}, cell)

	// Bad input: 400.
	for _, q := range []string{"step=1s", "level=aisle", "after=" + at(5) + "&until=" + at(5), "after=monday", "step=0"} {
		st, doc := do(t, srv, "GET", "/v1/ui/leases?"+q, "")
		require.Equal(t, 400, st, "%s: %v", q, doc)
	}
}
