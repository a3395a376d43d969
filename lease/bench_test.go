package lease_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/lease"
	"github.com/metalloc/metalloc/topology"
	"github.com/metalloc/metalloc/web"
)

// BenchmarkAvailability measures GET /v1/leases/availability (and the
// lease calendar, GET /v1/ui/leases) at the size
// of issue 43's target: 10,000 reservable nodes of one class in 250 racks
// of 40, and 5,000 leases over 30 days (each 8 nodes of one rack for 24 h,
// 20 after each other per rack, the two halves of a rack 12 h apart:
// 40,000 lease_nodes rows), built with SQL inserts. The target is p99 <
// 100 ms per request; ns/op is the mean.
//
//	metalloc-manage dev exec -- go test -run '^$' -bench BenchmarkAvailability ./lease/
func BenchmarkAvailability(b *testing.B) {
	srv, _ := benchFleet(b)
	const avail = "/v1/leases/availability?"
	for _, q := range []struct{ name, query string }{
		{"earliest-16-in-a-rack-48h", avail + "resource_class=gpu&count=16&level=rack&duration=48h"},
		{"earliest-2000-anywhere-7d", avail + "resource_class=gpu&count=2000&duration=168h"},
		{"calendar-30d-hourly-per-rack", avail + "level=rack&until=2030-01-31T00:00:00Z"},
		// The fleet page's lease calendar (GET /v1/ui/leases): a week in
		// 6-hour cells per rack, the leases named (1,250 of them).
		{"lease-calendar-week-6h-per-rack", "/v1/ui/leases?after=2030-01-01T00:00:00Z&until=2030-01-08T00:00:00Z&step=6h"},
	} {
		b.Run(q.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get(srv.URL + q.query)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("%s: %d", q.query, resp.StatusCode)
				}
			}
		})
	}
}

// benchFleet is the fleet of BenchmarkAvailability (see there) behind a
// lease handler whose clock is t0 (2030-01-01).
func benchFleet(b *testing.B) (srv *httptest.Server, t0 time.Time) {
	pool := dbtest.New(b)
	ctx := context.Background()
	dbtest.RackedNodes(b, pool, 250, 40, "gpu")
	_, err := pool.Exec(ctx, `UPDATE nodes SET reservable = true`)
	require.NoError(b, err)
	require.NoError(b, topology.Save(ctx, pool,
		[]topology.Level{{Name: "row", Source: "extra.row"}, {Name: "rack", Source: "extra.rack"}}))
	t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	// Lease i: rack i % 250, slot k = i / 250 (0..19), nodes 8*(k%5) ..
	// +8 of the rack, from day 1.5*k for 24 h.
	_, err = pool.Exec(ctx, `
		INSERT INTO leases (uuid, project_id, start_time, end_time)
		SELECT gen_random_uuid(), 'p' || i % 50, $1::timestamptz + (i / 250) * interval '36 h',
		       $1::timestamptz + (i / 250) * interval '36 h' + interval '24 h'
		  FROM generate_series(0, 4999) i`, t0)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `INSERT INTO lease_reservations (lease_id, resource_class, count) SELECT id, 'gpu', 8 FROM leases`)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `
		WITH l AS (SELECT id, start_time, end_time, row_number() OVER (ORDER BY id) - 1 AS i FROM leases),
		     n AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS j FROM nodes)
		INSERT INTO lease_nodes (lease_id, reservation_id, node_id, during)
		SELECT l.id, r.id, n.id, tstzrange(l.start_time, l.end_time)
		  FROM l JOIN lease_reservations r ON r.lease_id = l.id
		  JOIN n ON n.j / 40 = l.i % 250 AND (n.j % 40) / 8 = (l.i / 250) % 5`)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `ANALYZE`)
	require.NoError(b, err)

	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	lease.NewHandler(pool, lease.HandlerOptions{Now: func() time.Time { return t0 }}).Register(e.Group("/v1", web.IronicVersion()))
	srv = httptest.NewServer(e)
	b.Cleanup(srv.Close)
	return srv, t0
}

// BenchmarkAdmission measures POST /v1/leases on BenchmarkAvailability's
// fleet (10,000 nodes, 5,000 leases over 30 days): one client, each lease
// 1-16 nodes of one rack (required) for 1-72 h starting in the 30 days,
// as loadgen's mix draws them; admitted (201) or refused (409: nothing
// fits), both timed. The target of issue 43 is p99 < 50 ms under the
// load of bench leases; ns/op is one client's mean, and the profile
// (-cpuprofile) is where the API's time goes.
//
//	metalloc-manage dev exec -- go test -run '^$' -bench BenchmarkAdmission ./lease/
func BenchmarkAdmission(b *testing.B) {
	srv, t0 := benchFleet(b)
	rnd := rand.New(rand.NewPCG(43, 43))
	var admitted, refused int
	for b.Loop() {
		hours := 1 + rnd.IntN(72)
		start := t0.Add(time.Duration(rnd.IntN(30*24-hours)) * time.Hour)
		body, _ := json.Marshal(map[string]any{
			"project_id": "bench", "start_time": start.Format(time.RFC3339),
			"end_time":     start.Add(time.Duration(hours) * time.Hour).Format(time.RFC3339),
			"reservations": []any{map[string]any{"resource_class": "gpu", "count": 1 + rnd.IntN(16), "required": "rack"}},
		})
		resp, err := http.Post(srv.URL+"/v1/leases", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusCreated:
			admitted++
		case http.StatusConflict:
			refused++
		default:
			b.Fatalf("POST /v1/leases: %d", resp.StatusCode)
		}
	}
	b.ReportMetric(float64(refused)/float64(max(admitted+refused, 1)), "refused/op")
}
