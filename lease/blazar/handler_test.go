package blazar_test

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
	"github.com/metalloc/metalloc/lease/blazar"
	"github.com/metalloc/metalloc/web"
)

// t0 is the tests' "now".
var t0 = time.Date(2030, 1, 6, 9, 0, 0, 0, time.UTC)

// server serves Blazar's API and metalloc's /v1/leases on pool, with the
// clock at t0 and a 15 minute lease.ending notice.
func server(t *testing.T, pool *pgxpool.Pool) *httptest.Server {
	t.Helper()
	e := echo.New()
	e.HTTPErrorHandler = blazar.ErrorHandler(web.IronicErrorHandler)
	now := func() time.Time { return t0 }
	log := zaptest.NewLogger(t)
	lease.NewHandler(pool, lease.HandlerOptions{Log: log, Now: now}).Register(e.Group("/v1", web.IronicVersion()))
	blazar.NewHandler(pool, blazar.Options{Log: log, Now: now, EndingNotice: 15 * time.Minute}).Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, srv *httptest.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var doc map[string]any
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &doc), "%s", raw)
	}
	return resp.StatusCode, doc
}

// gpus inserts n reservable nodes of class gpu named gpu-1..n, with
// memory_mb 2048 for the odd ones and 8192 for the even ones, the even
// ones with capability gpu:true and trait CUSTOM_A100; returns their ids.
func gpus(t *testing.T, pool *pgxpool.Pool, n int) []int64 {
	t.Helper()
	var ids []int64
	for i := 1; i <= n; i++ {
		spec := dbtest.NodeSpec{Name: fmt.Sprintf("gpu-%d", i), ResourceClass: "gpu",
			Properties: map[string]any{"memory_mb": 2048, "cpus": 8, "local_gb": 100, "capabilities": "boot_mode:uefi"}}
		if i%2 == 0 {
			spec.Properties = map[string]any{"memory_mb": 8192, "cpus": 32, "local_gb": 500, "capabilities": "boot_mode:uefi,gpu:true"}
			spec.Traits = []string{"CUSTOM_A100"}
		}
		id, _ := dbtest.Node(t, pool, spec)
		ids = append(ids, id)
	}
	_, err := pool.Exec(context.Background(), `UPDATE nodes SET reservable = true`)
	require.NoError(t, err)
	return ids
}

// fixture is a database with gpus(n) and the server on it.
func fixture(t *testing.T, n int) (*pgxpool.Pool, *httptest.Server, []int64) {
	t.Helper()
	pool := dbtest.New(t)
	ids := gpus(t, pool, n)
	return pool, server(t, pool), ids
}

func leaseBody(name, start, end string, lo, hi int, props string) string {
	b, _ := json.Marshal(map[string]any{"name": name, "start_date": start, "end_date": end, "events": []any{},
		"before_end_date": nil, "reservations": []any{map[string]any{"resource_type": "physical:host", "min": lo, "max": hi,
			"resource_properties": props, "hypervisor_properties": ""}}})
	return string(b)
}

func reservation(doc map[string]any) map[string]any {
	return doc["lease"].(map[string]any)["reservations"].([]any)[0].(map[string]any)
}

// bookedNodes reads the nodes the first reservation of Blazar's lease doc
// booked, through /v1/leases (Blazar shows the range asked, not them).
func bookedNodes(t *testing.T, srv *httptest.Server, doc map[string]any) []string {
	t.Helper()
	st, mine := do(t, srv, "GET", "/v1/leases/"+doc["lease"].(map[string]any)["id"].(string), "")
	require.Equal(t, http.StatusOK, st, "%v", mine)
	var out []string
	for _, n := range mine["reservations"].([]any)[0].(map[string]any)["nodes"].([]any) {
		out = append(out, n.(string))
	}
	return out
}

// TestLeaseLifecycle: blazarclient's create, show, list, extend (PUT
// end_date), rename and delete, each seen by /v1/leases too (one model),
// in Blazar's shapes and date formats.
func TestLeaseLifecycle(t *testing.T) {
	t.Parallel()
	_, srv, _ := fixture(t, 6)

	st, doc := do(t, srv, "POST", "/reservation/v1/leases",
		leaseBody("week", "2030-01-06 10:00", "2030-01-08 10:00", 1, 2, `["=", "$resource_class", "gpu"]`))
	require.Equal(t, http.StatusCreated, st, "%v", doc)
	l := doc["lease"].(map[string]any)
	id := l["id"].(string)
	require.Equal(t, "week", l["name"])
	require.Equal(t, "2030-01-06T10:00:00.000000", l["start_date"])
	require.Equal(t, "2030-01-08T10:00:00.000000", l["end_date"])
	require.Equal(t, "2030-01-08T09:45:00.000000", l["before_end_date"])
	require.Equal(t, blazar.StatusPending, l["status"])
	require.Equal(t, false, l["degraded"])
	require.Equal(t, blazar.NoProject, l["project_id"])
	r := reservation(doc)
	require.Equal(t, "physical:host", r["resource_type"])
	require.EqualValues(t, 1, r["min"])
	require.EqualValues(t, 2, r["max"])
	require.Equal(t, `["=","$resource_class","gpu"]`, r["resource_properties"])
	require.Equal(t, "pending", r["status"])
	require.Equal(t, id, r["lease_id"])
	events := map[string]string{}
	for _, e := range l["events"].([]any) {
		ev := e.(map[string]any)
		events[ev["event_type"].(string)] = ev["time"].(string) + " " + ev["status"].(string)
	}
	require.Equal(t, map[string]string{"start_lease": "2030-01-06T10:00:00.000000 UNDONE",
		"end_lease": "2030-01-08T10:00:00.000000 UNDONE", "before_end_lease": "2030-01-08T09:45:00.000000 UNDONE"}, events)

	// The same lease through metalloc's API.
	st, mine := do(t, srv, "GET", "/v1/leases/"+id, "")
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, "week", mine["name"])
	require.Len(t, mine["reservations"].([]any)[0].(map[string]any)["nodes"], 2)

	st, doc = do(t, srv, "GET", "/reservation/v1/leases/"+id, "")
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, id, doc["lease"].(map[string]any)["id"])
	st, doc = do(t, srv, "GET", "/reservation/v1/leases", "")
	require.Equal(t, http.StatusOK, st)
	require.Len(t, doc["leases"], 1)

	// Extend (what --prolong-for 1d sends) and rename.
	st, doc = do(t, srv, "PUT", "/reservation/v1/leases/"+id, `{"end_date": "2030-01-09 10:00", "name": "longer"}`)
	require.Equal(t, http.StatusOK, st, "%v", doc)
	require.Equal(t, "2030-01-09T10:00:00.000000", doc["lease"].(map[string]any)["end_date"])
	require.Equal(t, "longer", doc["lease"].(map[string]any)["name"])
	st, mine = do(t, srv, "GET", "/v1/leases/longer", "")
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, "2030-01-09T10:00:00Z", mine["end_time"])

	// A lease made through /v1/leases is seen by Blazar's API.
	st, mine = do(t, srv, "POST", "/v1/leases", `{"name": "mine", "project_id": "p1",
		"start_time": "2030-01-10T00:00:00Z", "end_time": "2030-01-11T00:00:00Z",
		"reservations": [{"resource_class": "gpu", "count": 1, "traits": ["CUSTOM_A100"]}]}`)
	require.Equal(t, http.StatusCreated, st, "%v", mine)
	st, doc = do(t, srv, "GET", "/reservation/v1/leases/mine", "")
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, `["and",["=","$resource_class","gpu"],["=","$CUSTOM_A100","true"]]`, reservation(doc)["resource_properties"])
	require.EqualValues(t, 1, reservation(doc)["min"], "an exact count: min = max = count")
	require.EqualValues(t, 1, reservation(doc)["max"])
	require.Equal(t, "p1", doc["lease"].(map[string]any)["project_id"])

	// Unsupported changes: 400 in Blazar's error body.
	st, doc = do(t, srv, "PUT", "/reservation/v1/leases/"+id, `{"start_date": "2030-01-07 10:00"}`)
	require.Equal(t, http.StatusBadRequest, st)
	require.EqualValues(t, 400, doc["error_code"])
	require.EqualValues(t, 400, doc["error_name"])
	require.Contains(t, doc["error_message"], "Moving a lease's start_date is not supported")
	st, _ = do(t, srv, "PUT", "/reservation/v1/leases/"+id, `{"start_date": "2030-01-06 10:00", "reservations": [{"id": "x"}]}`)
	require.Equal(t, http.StatusOK, st)
	st, doc = do(t, srv, "PUT", "/reservation/v1/leases/"+id, `{"reservations": [{"id": "x", "max": 3}]}`)
	require.Equal(t, http.StatusBadRequest, st)
	require.Contains(t, doc["error_message"], "Changing a reservation (max) is not supported")

	st, _ = do(t, srv, "DELETE", "/reservation/v1/leases/"+id, "")
	require.Equal(t, http.StatusNoContent, st)
	st, doc = do(t, srv, "GET", "/reservation/v1/leases/"+id, "")
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, map[string]any{"error_code": float64(404), "error_name": float64(404),
		"error_message": "Object with {'lease_id': '" + id + "'} not found"}, doc)
	st, _ = do(t, srv, "GET", "/v1/leases/"+id, "")
	require.Equal(t, http.StatusNotFound, st)
}

// TestMinMax: max when it fits, else the most between min and max that
// do; below min, 409 with metalloc's reason. Create, show and list give
// back the min and max asked, as Blazar does (the count booked is the
// lease's nodes, in /v1/leases).
func TestMinMax(t *testing.T) {
	t.Parallel()
	pool, srv, _ := fixture(t, 5)
	for _, c := range []struct {
		lo, hi, want int
	}{{3, 3, 3}, {1, 4, 2}, {1, 1, 0}} {
		name := fmt.Sprintf("l%d%d", c.lo, c.hi)
		st, doc := do(t, srv, "POST", "/reservation/v1/leases", leaseBody(name, "2030-01-07 00:00", "2030-01-08 00:00", c.lo, c.hi, ""))
		if c.want == 0 {
			require.Equal(t, http.StatusConflict, st, "%v", doc)
			require.Contains(t, doc["error_message"], "Not enough hosts available: Lease does not fit: reservation 1 (1 of gpu)")
			continue
		}
		require.Equal(t, http.StatusCreated, st, "%v", doc)
		require.Len(t, bookedNodes(t, srv, doc), c.want)
		for _, doc := range []map[string]any{doc, getDoc(t, srv, "/reservation/v1/leases/"+name)} {
			require.EqualValues(t, c.lo, reservation(doc)["min"], name)
			require.EqualValues(t, c.hi, reservation(doc)["max"], name)
		}
	}
	ranges := map[string]string{}
	for _, l := range getDoc(t, srv, "/reservation/v1/leases")["leases"].([]any) {
		r := l.(map[string]any)["reservations"].([]any)[0].(map[string]any)
		ranges[l.(map[string]any)["name"].(string)] = fmt.Sprintf("%v-%v", r["min"], r["max"])
	}
	require.Equal(t, map[string]string{"l33": "3-3", "l14": "1-4"}, ranges)
	var lo, hi, count int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT r.min_count, r.max_count, r.count
		FROM lease_reservations r JOIN leases l ON l.id = r.lease_id WHERE l.name = 'l14'`).Scan(&lo, &hi, &count))
	require.Equal(t, [3]int{1, 4, 2}, [3]int{lo, hi, count}, "the range asked and the count booked")
	// Starting after those end: all five again.
	st, doc := do(t, srv, "POST", "/reservation/v1/leases", leaseBody("later", "2030-01-08 00:00", "2030-01-09 00:00", 2, 9, ""))
	require.Equal(t, http.StatusCreated, st, "%v", doc)
	require.Len(t, bookedNodes(t, srv, doc), 5)
	require.EqualValues(t, 9, reservation(doc)["max"])
}

// getDoc GETs path and returns its document (200 required).
func getDoc(t *testing.T, srv *httptest.Server, path string) map[string]any {
	t.Helper()
	st, doc := do(t, srv, "GET", path, "")
	require.Equal(t, http.StatusOK, st, "%s: %v", path, doc)
	return doc
}

// TestProperties: resource_properties and hypervisor_properties pick
// the nodes they describe.
func TestProperties(t *testing.T) {
	t.Parallel()
	pool, srv, ids := fixture(t, 6)
	even := map[string]bool{}
	for i, id := range ids {
		if i%2 == 1 {
			var u string
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT uuid::text FROM nodes WHERE id = $1`, id).Scan(&u))
			even[u] = true
		}
	}
	for i, c := range []struct{ rp, hp string }{
		{`["and", [">=", "$memory_mb", "4096"], ["=", "$gpu", "true"]]`, ""},
		{`["=", "$CUSTOM_A100", "true"]`, ""},
		{"", `[">", "$vcpus", "16"]`},
	} {
		body := fmt.Sprintf(`{"name": "p%d", "start_date": "2030-01-%02d 00:00", "end_date": "2030-01-%02d 00:00",
			"reservations": [{"resource_type": "physical:host", "min": 1, "max": 5, "resource_properties": %q,
			"hypervisor_properties": %q}]}`, i, 10+i, 11+i, c.rp, c.hp)
		st, doc := do(t, srv, "POST", "/reservation/v1/leases", body)
		require.Equal(t, http.StatusCreated, st, "%s: %v", body, doc)
		got := bookedNodes(t, srv, doc)
		require.Len(t, got, 3, body)
		for _, u := range got {
			require.True(t, even[u], "%s booked %s", body, u)
		}
	}
	// No node matches: 409; several classes: 400 asking for one.
	st, doc := do(t, srv, "POST", "/reservation/v1/leases", leaseBody("none", "2030-01-20 00:00", "2030-01-21 00:00", 1, 1,
		`[">", "$memory_mb", "100000"]`))
	require.Equal(t, http.StatusConflict, st)
	require.Contains(t, doc["error_message"], "no reservable host matches reservation 1")
	dbtest.Node(t, pool, dbtest.NodeSpec{Name: "gold-1", ResourceClass: "gold", Properties: map[string]any{"memory_mb": 9000}})
	_, err := pool.Exec(context.Background(), `UPDATE nodes SET reservable = true`)
	require.NoError(t, err)
	st, doc = do(t, srv, "POST", "/reservation/v1/leases", leaseBody("two", "2030-01-20 00:00", "2030-01-21 00:00", 1, 1,
		`[">", "$memory_mb", "4096"]`))
	require.Equal(t, http.StatusBadRequest, st)
	require.Contains(t, doc["error_message"], "several resource classes (gold, gpu)")
	st, doc = do(t, srv, "POST", "/reservation/v1/leases", leaseBody("or", "2030-01-20 00:00", "2030-01-21 00:00", 1, 1,
		`["or", ["=", "$gpu", "true"], ["=", "$gpu", "false"]]`))
	require.Equal(t, http.StatusBadRequest, st)
	require.Contains(t, doc["error_message"], `"or" is not supported`)
}

// TestBadInput: Blazar's requests that metalloc refuses, each a 400 (or
// 404, 409) in Blazar's error body, never a 500.
func TestBadInput(t *testing.T) {
	t.Parallel()
	_, srv, _ := fixture(t, 2)
	st, doc := do(t, srv, "POST", "/reservation/v1/leases", leaseBody("dup", "2030-01-07 00:00", "2030-01-07 01:00", 1, 1, ""))
	require.Equal(t, http.StatusCreated, st, "%v", doc)
	for body, want := range map[string]string{
		leaseBody("dup", "2030-01-08 00:00", "2030-01-08 01:00", 1, 1, ""):                                                                                               "409 The lease with name: dup already exists",
		leaseBody("a", "2030-01-05 00:00", "2030-01-08 01:00", 1, 1, ""):                                                                                                 "400 Start date must be later than current date",
		leaseBody("a", "2030-01-08 00:00", "2030-01-08 00:00", 1, 1, ""):                                                                                                 "400 End date must be later than start date.",
		leaseBody("a", "tomorrow", "2030-01-08 00:00", 1, 1, ""):                                                                                                         "400 Invalid date format for start_date",
		leaseBody("a", "2030-01-08 00:00", "2030-01-09 00:00", 3, 2, ""):                                                                                                 "400 Invalid reservation 1: min 3 is greater than max 2",
		leaseBody("a", "2030-01-08 00:00", "2030-01-09 00:00", 1, 1, "[\"="):                                                                                             "400 Invalid reservation 1: resource_properties",
		leaseBody("12345678-1234-1234-1234-123456789012", "now", "2030-01-09 00:00", 1, 1, ""):                                                                           "400 Invalid lease name",
		`{"name": "a", "end_date": "2030-01-09 00:00", "reservations": [{"resource_type": "virtual:instance", "min": 1, "max": 1}]}`:                                     "400 Schema error",
		`{"name": "a", "end_date": "2030-01-09 00:00", "reservations": [{"resource_type": "physical:host", "min": 1, "max": 1, "before_end": "snapshot"}]}`:              `400 Invalid reservation 1: before_end "snapshot" is not supported`,
		`{"name": "a", "end_date": "2030-01-09 00:00", "before_end_date": "2030-01-08 00:00", "reservations": [{"resource_type": "physical:host", "min": 1, "max": 1}]}`: "400 before_end_date 2030-01-08 00:00 is not supported",
		`{"name": "a", "end_date": "2030-01-09 00:00", "events": [{"event_type": "x"}], "reservations": [{"resource_type": "physical:host", "min": 1, "max": 1}]}`:       "400 Lease events are not supported",
		`{"name": "a", "end_date": "2030-01-09 00:00", "reservations": []}`:                                                                                              "400 Schema error",
		`{"name": "a", "end_date": "2030-01-09 00:00", "trust_id": "x", "reservations": [{"resource_type": "physical:host", "min": 1, "max": 1}]}`:                       "400 Schema error",
		`[]`: "400 Schema error",
	} {
		st, doc := do(t, srv, "POST", "/reservation/v1/leases", body)
		got := fmt.Sprintf("%d %v", st, doc["error_message"])
		require.True(t, strings.HasPrefix(got, want), "%s: got %s, want %s", body, got, want)
		require.EqualValues(t, st, doc["error_code"], body)
	}
	// A before_end_date equal to the notice is accepted.
	st, doc = do(t, srv, "POST", "/reservation/v1/leases", `{"name": "b", "start_date": "now", "end_date": "2030-01-06 12:00",
		"before_end_date": "2030-01-06 11:45", "reservations": [{"resource_type": "physical:host", "min": "1", "max": "1"}]}`)
	require.Equal(t, http.StatusCreated, st, "%v", doc)
	require.Equal(t, "2030-01-06T09:00:01.000000", doc["lease"].(map[string]any)["start_date"])
	// Unknown routes under the prefix: Blazar's 404 body.
	st, doc = do(t, srv, "GET", "/reservation/v1/floatingips", "")
	require.Equal(t, http.StatusNotFound, st)
	require.EqualValues(t, 404, doc["error_code"])
	st, doc = do(t, srv, "PATCH", "/reservation/v1/leases/dup", "{}")
	require.Equal(t, http.StatusMethodNotAllowed, st)
	require.EqualValues(t, 405, doc["error_code"])
}

// TestActiveDelete: deleting an active lease ends it (its end moves to
// the next second), as Blazar does; it stays, TERMINATING until a
// conductor ends it.
func TestActiveDelete(t *testing.T) {
	t.Parallel()
	pool, srv, _ := fixture(t, 2)
	st, doc := do(t, srv, "POST", "/reservation/v1/leases", leaseBody("act", "now", "2030-01-07 00:00", 1, 1, ""))
	require.Equal(t, http.StatusCreated, st, "%v", doc)
	id := doc["lease"].(map[string]any)["id"].(string)
	// Started an hour ago (the conductors' move, by hand).
	_, err := pool.Exec(context.Background(), `UPDATE leases SET state = 'active', start_time = '2030-01-06T08:00:00Z'`)
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `UPDATE lease_nodes SET during = tstzrange('2030-01-06T08:00:00Z', upper(during))`)
	require.NoError(t, err)
	st, doc = do(t, srv, "GET", "/reservation/v1/leases/"+id, "")
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, blazar.StatusActive, doc["lease"].(map[string]any)["status"])
	st, _ = do(t, srv, "DELETE", "/reservation/v1/leases/"+id, "")
	require.Equal(t, http.StatusNoContent, st)
	st, doc = do(t, srv, "GET", "/reservation/v1/leases/"+id, "")
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, "2030-01-06T09:00:01.000000", doc["lease"].(map[string]any)["end_date"])
}

// TestRacingMinMax: 12 clients each asking for 1 to 3 of 10 nodes over
// the same window never book a node twice (checked against the table)
// and each gets 1 to 3 nodes or a 409.
func TestRacingMinMax(t *testing.T) {
	t.Parallel()
	pool, srv, _ := fixture(t, 10)
	var wg sync.WaitGroup
	got := make([]int, 12)
	refused := make([]string, 12)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, doc := do(t, srv, "POST", "/reservation/v1/leases", leaseBody(fmt.Sprintf("race-%d", i),
				"2030-01-07 00:00", "2030-01-08 00:00", 1, 3, ""))
			switch st {
			case http.StatusCreated:
				got[i] = len(bookedNodes(t, srv, doc))
			case http.StatusConflict:
				refused[i] = fmt.Sprint(doc["error_message"])
			default:
				t.Errorf("race-%d: %d %v", i, st, doc)
			}
		}()
	}
	wg.Wait()
	total, contended := 0, false
	for i, n := range got {
		require.True(t, n >= 0 && n <= 3)
		total += n
		if n == 0 {
			require.Regexp(t, "^(Not enough hosts available|Lease not admitted: .* try again)", refused[i])
			contended = contended || strings.HasPrefix(refused[i], "Lease not admitted")
		}
	}
	var rows, distinct int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*), count(DISTINCT node_id) FROM lease_nodes WHERE NOT released`).Scan(&rows, &distinct))
	require.Equal(t, total, rows, "the answers add up to the rows: %v", got)
	require.Equal(t, rows, distinct, "no node booked twice")
	if !contended {
		// 12 clients of at least one node each on 10: the pool runs out.
		require.Equal(t, 10, total, "%v", got)
	}
}

// TestHosts: os-hosts lists and shows the reservable nodes; create puts a
// node in the pool, delete takes it out unless a lease holds it.
func TestHosts(t *testing.T) {
	t.Parallel()
	pool, srv, ids := fixture(t, 2)
	free, _ := dbtest.Node(t, pool, dbtest.NodeSpec{Name: "spare", ResourceClass: "gpu"})

	st, doc := do(t, srv, "GET", "/reservation/v1/os-hosts", "")
	require.Equal(t, http.StatusOK, st)
	hosts := doc["hosts"].([]any)
	require.Len(t, hosts, 2)
	h := hosts[1].(map[string]any)
	require.Equal(t, fmt.Sprint(ids[1]), h["id"])
	require.Equal(t, "gpu-2", h["hypervisor_hostname"])
	require.EqualValues(t, 8192, h["memory_mb"])
	require.EqualValues(t, 32, h["vcpus"])
	require.EqualValues(t, 500, h["local_gb"])
	require.Equal(t, "true", h["gpu"])
	require.Equal(t, "gpu", h["resource_class"])

	for _, ident := range []string{fmt.Sprint(ids[0]), "gpu-1", h["service_name"].(string)} {
		st, doc = do(t, srv, "GET", "/reservation/v1/os-hosts/"+ident, "")
		require.Equal(t, http.StatusOK, st, ident)
		if ident != h["service_name"] {
			require.Equal(t, "gpu-1", doc["host"].(map[string]any)["hypervisor_hostname"])
		}
	}
	st, doc = do(t, srv, "GET", fmt.Sprintf("/reservation/v1/os-hosts/%d", free), "")
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, fmt.Sprintf("Object with {'host_id': '%d'} not found", free), doc["error_message"])

	st, doc = do(t, srv, "POST", "/reservation/v1/os-hosts", `{"name": "spare"}`)
	require.Equal(t, http.StatusCreated, st, "%v", doc)
	require.Equal(t, fmt.Sprint(free), doc["host"].(map[string]any)["id"])
	st, _ = do(t, srv, "POST", "/reservation/v1/os-hosts", `{"name": "spare"}`)
	require.Equal(t, http.StatusConflict, st)
	st, doc = do(t, srv, "POST", "/reservation/v1/os-hosts", `{"name": "gpu-1", "gpu": "true"}`)
	require.Equal(t, http.StatusBadRequest, st, "%v", doc)
	st, doc = do(t, srv, "PUT", fmt.Sprintf("/reservation/v1/os-hosts/%d", free), `{"values": {"gpu": "true"}}`)
	require.Equal(t, http.StatusBadRequest, st)
	require.Contains(t, doc["error_message"], "not supported")

	// Book all three; the booked ones stay in the pool.
	st, doc = do(t, srv, "POST", "/reservation/v1/leases", leaseBody("all", "2030-01-07 00:00", "2030-01-08 00:00", 3, 3, ""))
	require.Equal(t, http.StatusCreated, st, "%v", doc)
	st, doc = do(t, srv, "DELETE", fmt.Sprintf("/reservation/v1/os-hosts/%d", free), "")
	require.Equal(t, http.StatusConflict, st)
	require.Contains(t, doc["error_message"], "booked by a pending or active lease")
	st, _ = do(t, srv, "DELETE", "/reservation/v1/leases/all", "")
	require.Equal(t, http.StatusNoContent, st)
	st, _ = do(t, srv, "DELETE", fmt.Sprintf("/reservation/v1/os-hosts/%d", free), "")
	require.Equal(t, http.StatusNoContent, st)
	st, doc = do(t, srv, "GET", "/reservation/v1/os-hosts", "")
	require.Equal(t, http.StatusOK, st)
	require.Len(t, doc["hosts"], 2)
}

// TestStatus: metalloc's states as Blazar's statuses.
func TestStatus(t *testing.T) {
	t.Parallel()
	l := lease.Lease{StartTime: t0, EndTime: t0.Add(time.Hour)}
	for state, want := range map[string][2]string{
		lease.StatePending:   {blazar.StatusPending, blazar.StatusStarting},
		lease.StateActive:    {blazar.StatusActive, blazar.StatusActive},
		lease.StateEnded:     {blazar.StatusTerminated, blazar.StatusTerminated},
		lease.StateCancelled: {blazar.StatusTerminated, blazar.StatusTerminated},
		lease.StateError:     {blazar.StatusError, blazar.StatusError},
	} {
		l.State = state
		require.Equal(t, want[0], blazar.Status(l, t0.Add(-time.Second)), state)
		require.Equal(t, want[1], blazar.Status(l, t0), state)
	}
	l.State = lease.StateActive
	require.Equal(t, blazar.StatusTerminating, blazar.Status(l, t0.Add(time.Hour)))
}
