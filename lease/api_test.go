package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/lease"
	"github.com/metalloc/metalloc/topology"
	"github.com/metalloc/metalloc/web"
)

// t0 is the tests' "now": leases are booked after it.
var t0 = time.Date(2030, 1, 6, 9, 0, 0, 0, time.UTC)

// fleet inserts racks x perRack reservable nodes of class gpu (rows and
// racks as dbtest.RackedNodes: rack r01 ...), topology row/rack, and
// returns the pool.
func fleet(t *testing.T, racks, perRack int) *pgxpool.Pool {
	t.Helper()
	pool := dbtest.New(t)
	dbtest.RackedNodes(t, pool, racks, perRack, "gpu")
	_, err := pool.Exec(context.Background(), `UPDATE nodes SET reservable = true`)
	require.NoError(t, err)
	require.NoError(t, topology.Save(context.Background(), pool,
		[]topology.Level{{Name: "row", Source: "extra.row"}, {Name: "rack", Source: "extra.rack"}}))
	return pool
}

// server serves the lease API on pool, with the clock at t0.
func server(t *testing.T, pool *pgxpool.Pool) *httptest.Server {
	t.Helper()
	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	v1 := e.Group("/v1", web.IronicVersion())
	lease.NewHandler(pool, lease.HandlerOptions{Log: zaptest.NewLogger(t), Now: func() time.Time { return t0 }}).Register(v1)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, srv *httptest.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var doc map[string]any
	_ = json.Unmarshal(raw, &doc)
	if m, ok := doc["error_message"].(string); ok {
		_ = json.Unmarshal([]byte(m), &doc)
	}
	return resp.StatusCode, doc
}

func at(h int) string { return t0.Add(time.Duration(h) * time.Hour).Format(time.RFC3339) }

func leaseBody(name string, from, to, count int, extra string) string {
	return fmt.Sprintf(`{"name":%q,"project_id":"p1","start_time":%q,"end_time":%q,
		"reservations":[{"resource_class":"gpu","count":%d%s}]}`, name, at(from), at(to), count, extra)
}

func nodesOf(doc map[string]any) []string {
	var out []string
	for _, r := range doc["reservations"].([]any) {
		for _, n := range r.(map[string]any)["nodes"].([]any) {
			out = append(out, n.(string))
		}
	}
	return out
}

// TestAdmissionAndRefusal books leases in one rack until it is full: the
// refusal says per filter why, and names the earliest window for the
// whole lease; a cancelled lease stops blocking.
func TestAdmissionAndRefusal(t *testing.T) {
	pool := fleet(t, 2, 4) // racks r01 and r02, 4 nodes each
	srv := server(t, pool)
	_, err := pool.Exec(context.Background(), `UPDATE nodes SET maintenance = true WHERE name = 'gpu-8'`)
	require.NoError(t, err)

	st, a := do(t, srv, "POST", "/v1/leases", leaseBody("a", 0, 48, 4, `,"required":"rack"`))
	require.Equal(t, 201, st, "%v", a)
	require.Len(t, nodesOf(a), 4)
	require.Equal(t, "pending", a["state"])
	require.Equal(t, at(0), a["start_time"])
	r := a["reservations"].([]any)[0].(map[string]any)
	require.Contains(t, []any{"1/r01", "2/r02"}, r["domain"]) // two racks: r01 in row 1, r02 in row 2

	// Rack of 4 taken; the other has 3 out of maintenance.
	st, b := do(t, srv, "POST", "/v1/leases", leaseBody("b", 24, 72, 4, `,"required":"rack"`))
	require.Equal(t, 409, st, "%v", b)
	msg := b["faultstring"].(string)
	require.Contains(t, msg, "reservation 1 (4 of gpu, in one rack): 8 reservable nodes of gpu, 7 not in maintenance, "+
		"3 of them free from "+at(24)+" to "+at(72))
	require.Contains(t, msg, "the earliest window for the whole lease starts at "+at(48)+" (until "+at(96)+")")

	// Without the rack rule 3 are free too: 4 do not fit.
	st, b = do(t, srv, "POST", "/v1/leases", leaseBody("b", 24, 72, 5, `,"traits":["CUSTOM_X"]`))
	require.Equal(t, 409, st)
	require.Contains(t, b["faultstring"], "reservation 1 (5 of gpu with CUSTOM_X): 8 reservable nodes of gpu, 7 not in maintenance, 0 with the traits asked, 0 of them free")
	require.Contains(t, b["faultstring"], "the whole lease fits in no window of that length starting before")

	// Starting at the end of a is fine (half-open windows).
	st, c := do(t, srv, "POST", "/v1/leases", leaseBody("c", 48, 72, 7, ""))
	require.Equal(t, 201, st, "%v", c)

	// Cancel a: its nodes stop blocking, its rows stay (released).
	st, x := do(t, srv, "POST", "/v1/leases/a/cancel", "")
	require.Equal(t, 200, st, "%v", x)
	require.Equal(t, "cancelled", x["state"])
	require.Len(t, nodesOf(x), 4)
	st, b = do(t, srv, "POST", "/v1/leases", leaseBody("b", 0, 48, 7, ""))
	require.Equal(t, 201, st, "%v", b)

	// Bad input: 400 in Ironic's format, nothing stored.
	for _, body := range []string{
		leaseBody("bad", 10, 10, 1, ""),
		leaseBody("bad", -5, 1, 1, ""),
		leaseBody("bad", 1, 2, 0, ""),
		leaseBody("bad", 1, 2, 1, `,"required":"aisle"`),
		leaseBody("bad", 1, 2, 1, `,"traits":["CUSTOM_A"],"forbidden_traits":["CUSTOM_A"]`),
		`{"end_time":"tomorrow","project_id":"p","reservations":[{"resource_class":"gpu","count":1}]}`,
		`{"end_time":"` + at(3) + `","reservations":[{"resource_class":"gpu","count":1}]}`,
	} {
		st, doc := do(t, srv, "POST", "/v1/leases", body)
		require.Equal(t, 400, st, "%s: %v", body, doc)
	}
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM leases WHERE name = 'bad'`).Scan(&n))
	require.Zero(t, n)

	// List, filter, page, get by name, delete.
	st, l := do(t, srv, "GET", "/v1/leases?state=pending&limit=1", "")
	require.Equal(t, 200, st)
	require.Len(t, l["leases"], 1)
	require.Contains(t, l["next"], "state=pending")
	// The pages in creation order (c, then b), the next links kept.
	var names []any
	for next := l["next"]; next != nil; next = l["next"] {
		names = append(names, l["leases"].([]any)[0].(map[string]any)["name"])
		st, l = do(t, srv, "GET", strings.TrimPrefix(next.(string), srv.URL), "")
		require.Equal(t, 200, st, "%v", l)
	}
	require.Equal(t, []any{"c", "b"}, names)
	require.Empty(t, l["leases"])
	for query, want := range map[string]string{
		"project_id=p2": "200 0",
		"sort_key=name": "400 Leases are listed in creation order only: sort_key and sort_dir are not supported",
		"sort_dir=desc": "400 Leases are listed in creation order only",
		"marker=c":      "400 Expected UUID for marker: c",
		"marker=00000000-0000-4000-8000-000000000000": "404 Lease 00000000-0000-4000-8000-000000000000 could not be found.",
	} {
		st, doc := do(t, srv, "GET", "/v1/leases?"+query, "")
		got := fmt.Sprintf("%d %v", st, doc["faultstring"])
		if st == 200 {
			got = fmt.Sprintf("%d %d", st, len(doc["leases"].([]any)))
		}
		require.True(t, strings.HasPrefix(got, want), "%s: got %s, want %s", query, got, want)
	}
	st, _ = do(t, srv, "DELETE", "/v1/leases/c", "")
	require.Equal(t, 204, st)
	st, _ = do(t, srv, "GET", "/v1/leases/c", "")
	require.Equal(t, 404, st)
}

// TestPatchExtendBlocked extends a lease into another's window on one of
// its nodes: 409 naming the node and the lease, nothing changed; a
// shorter end and an extension into free time are admitted.
func TestPatchExtendBlocked(t *testing.T) {
	pool := fleet(t, 1, 2)
	srv := server(t, pool)
	st, a := do(t, srv, "POST", "/v1/leases", leaseBody("a", 0, 10, 1, ""))
	require.Equal(t, 201, st, "%v", a)
	st, b := do(t, srv, "POST", "/v1/leases", leaseBody("b", 20, 30, 2, ""))
	require.Equal(t, 201, st, "%v", b)

	st, x := do(t, srv, "PATCH", "/v1/leases/a", `[{"op":"replace","path":"/end_time","value":"`+at(25)+`"}]`)
	require.Equal(t, 409, st, "%v", x)
	require.Contains(t, x["faultstring"], "Cannot extend lease "+a["uuid"].(string)+" to "+at(25)+": node ")
	require.Contains(t, x["faultstring"], "is booked by lease "+b["uuid"].(string)+" from "+at(20))
	_, x = do(t, srv, "GET", "/v1/leases/a", "")
	require.Equal(t, at(10), x["end_time"])
	var upper time.Time
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT upper(during) FROM lease_nodes ln JOIN leases l ON l.id = ln.lease_id WHERE l.name = 'a'`).Scan(&upper))
	require.True(t, upper.Equal(t0.Add(10*time.Hour)))

	st, x = do(t, srv, "PATCH", "/v1/leases/a", `[{"op":"replace","path":"/end_time","value":"`+at(20)+`"}]`)
	require.Equal(t, 200, st, "%v", x)
	require.Equal(t, at(20), x["end_time"])
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT upper(during) FROM lease_nodes ln JOIN leases l ON l.id = ln.lease_id WHERE l.name = 'a'`).Scan(&upper))
	require.True(t, upper.Equal(t0.Add(20*time.Hour)))
	st, x = do(t, srv, "PATCH", "/v1/leases/a", `[{"op":"replace","path":"/end_time","value":"`+at(5)+`"}]`)
	require.Equal(t, 200, st, "%v", x)
	st, _ = do(t, srv, "PATCH", "/v1/leases/a", `[{"op":"replace","path":"/end_time","value":"`+at(0)+`"}]`)
	require.Equal(t, 400, st)
}

// TestAdmissionRace has 32 clients request overlapping leases on the
// same racks through 4 handler instances on separate pools (4 API
// servers): no node is in two overlapping blocking rows (a self-join over
// the table), every 201 has its nodes, and every refusal is a 409.
func TestAdmissionRace(t *testing.T) {
	pool := fleet(t, 4, 8) // 32 nodes
	url := pool.Config().ConnString()
	var srvs []*httptest.Server
	for range 4 {
		p, err := pgxpool.New(context.Background(), url)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		srvs = append(srvs, server(t, p))
	}
	type result struct {
		status int
		doc    map[string]any
	}
	results := make([]result, 32)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from := (i % 4) * 6 // windows of 12 h every 6 h: each overlaps its neighbours
			body := fmt.Sprintf(`{"project_id":"p%d","start_time":%q,"end_time":%q,
				"reservations":[{"resource_class":"gpu","count":%d,"required":"rack"}]}`, i, at(from), at(from+12), 2+i%3)
			st, doc := do(t, srvs[i%4], "POST", "/v1/leases", body)
			results[i] = result{st, doc}
		}()
	}
	wg.Wait()
	admitted := 0
	for i, r := range results {
		switch r.status {
		case 201:
			admitted++
			require.Len(t, nodesOf(r.doc), 2+i%3, "lease %d", i)
		case 409:
		default:
			t.Fatalf("client %d: %d %v", i, r.status, r.doc)
		}
	}
	var overlaps, rows, leases int
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT count(*) FROM lease_nodes a JOIN lease_nodes b
		    ON a.node_id = b.node_id AND a.lease_id < b.lease_id AND a.during && b.during
		 WHERE NOT a.released AND NOT b.released`).Scan(&overlaps))
	require.Zero(t, overlaps)
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT count(*), count(DISTINCT l.id) FROM leases l JOIN lease_nodes ln ON ln.lease_id = l.id`).Scan(&rows, &leases))
	require.Equal(t, admitted, leases)
	var all int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM leases`).Scan(&all))
	require.Equal(t, admitted, all, "every lease row has its nodes and a 201")
	t.Logf("%d of 32 admitted, %d rows", admitted, rows)
	require.Greater(t, admitted, 8)
}

// TestAvailability checks the earliest window and the calendar on a
// small hand-checked fleet: rack r01 (nodes 1-2) and r02 (nodes 3-4);
// lease A holds nodes 1, 2 over [0 h, 10 h), B node 3 over [5 h, 8 h).
func TestAvailability(t *testing.T) {
	pool := fleet(t, 2, 2)
	srv := server(t, pool)
	_, err := pool.Exec(context.Background(), `
		INSERT INTO leases (uuid, project_id, start_time, end_time) VALUES
		    (gen_random_uuid(), 'p', $1, $1::timestamptz + interval '10 h'),
		    (gen_random_uuid(), 'p', $1::timestamptz + interval '5 h', $1::timestamptz + interval '8 h')`, t0)
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `
		INSERT INTO lease_reservations (lease_id, resource_class, count) SELECT id, 'gpu', 1 FROM leases ORDER BY id`)
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `
		INSERT INTO lease_nodes (lease_id, reservation_id, node_id, during)
		SELECT l.id, r.id, n.id, tstzrange(l.start_time, l.end_time)
		  FROM leases l JOIN lease_reservations r ON r.lease_id = l.id JOIN nodes n
		    ON (l.id = (SELECT min(id) FROM leases) AND n.name IN ('gpu-1', 'gpu-2'))
		    OR (l.id = (SELECT max(id) FROM leases) AND n.name = 'gpu-3')`)
	require.NoError(t, err)

	cases := []struct {
		query, start, domain string
		free                 float64
	}{
		// 2 in one rack for 4 h: r02 is free for [0, 4) h (B starts at 5).
		{"count=2&level=rack&duration=4h", at(0), "2/r02", 2},
		// for 6 h: r02 blocked until 8, r01 until 10: r02 at 8.
		{"count=2&level=rack&duration=6h", at(8), "2/r02", 2},
		// 3 anywhere for 6 h: at 8 h nodes 3, 4 are free, 1, 2 not until 10.
		{"count=3&duration=6h", at(10), "", 4},
		// 1 for 5 h: node 4 at once.
		{"count=1&duration=18000", at(0), "", 2},
		{"count=4&duration=1h&after=" + at(9), at(10), "", 4},
	}
	for _, c := range cases {
		st, doc := do(t, srv, "GET", "/v1/leases/availability?resource_class=gpu&"+c.query, "")
		require.Equal(t, 200, st, "%s: %v", c.query, doc)
		require.Equal(t, c.start, doc["start_time"], c.query)
		if c.domain != "" {
			require.Equal(t, c.domain, doc["domain"], c.query)
		}
		require.Equal(t, c.free, doc["free"], c.query)
	}
	st, doc := do(t, srv, "GET", "/v1/leases/availability?resource_class=gpu&count=5&duration=1h", "")
	require.Equal(t, 200, st)
	require.Nil(t, doc["start_time"])
	require.Contains(t, doc["reason"], "4 reservable nodes of gpu are out of maintenance, 5 wanted")

	// The calendar in 4 h steps over [0, 12) h, per rack:
	// r01: busy [0,10): free 0, 0, 0 (the step [8,12) is partly busy);
	// r02: node 3 busy [5,8): steps [4,8) 1 free; [0,4) and [8,12) 2.
	st, doc = do(t, srv, "GET", "/v1/leases/availability?level=rack&step=4h&until="+at(12)+"&after="+at(0), "")
	require.Equal(t, 200, st, "%v", doc)
	require.Equal(t, float64(14400), doc["step"])
	capacity, _ := json.Marshal(doc["capacity"])
	require.JSONEq(t, `[{"resource_class":"gpu","domain":"1/r01","total":2,"free":[0,0,0]},
		{"resource_class":"gpu","domain":"2/r02","total":2,"free":[2,1,2]}]`, string(capacity))
	st, _ = do(t, srv, "GET", "/v1/leases/availability?step=1s&until="+at(1000), "")
	require.Equal(t, 400, st)
	st, _ = do(t, srv, "GET", "/v1/leases/availability?resource_class=gpu", "")
	require.Equal(t, 400, st)
}
