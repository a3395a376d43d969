package conductorapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/conductor"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
)

// conductorAPI is an httptest server with the conductor endpoints on a fresh
// database.
type conductorAPI struct {
	t    *testing.T
	pool *pgxpool.Pool
	srv  *httptest.Server
}

func setupConductorAPI(t *testing.T, opts HandlerOptions) *conductorAPI {
	t.Helper()
	pool := dbtest.New(t)
	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	e.JSONSerializer = web.JSONSerializer{}
	e.Pre(middleware.RemoveTrailingSlash())
	e.Use(web.RequestID(zaptest.NewLogger(t)))
	NewHandler(pool, opts).Register(e.Group("/v1", web.IronicVersion()))
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &conductorAPI{t: t, pool: pool, srv: srv}
}

// addConductor inserts a conductor row whose last heartbeat was ago, with
// a heartbeat timeout of a minute (its expiry: a minute after that).
func (a *conductorAPI) addConductor(hostname, group string, online bool, ago time.Duration, drivers ...string) {
	a.t.Helper()
	if drivers == nil {
		drivers = []string{}
	}
	_, err := a.pool.Exec(context.Background(), `
		INSERT INTO conductors (hostname, conductor_group, drivers, online, heartbeat_at, expires_at)
		VALUES ($1, $2, $3, $4, now() - make_interval(secs => $5), now() - make_interval(secs => $5) + interval '1 minute')`,
		hostname, group, drivers, online, ago.Seconds())
	require.NoError(a.t, err)
}

// get sends GET path at microversion ver ("" = none) and decodes the body.
func (a *conductorAPI) get(path, ver string) (int, map[string]any) {
	a.t.Helper()
	if !strings.HasPrefix(path, "http") {
		path = a.srv.URL + path
	}
	req, _ := http.NewRequest(http.MethodGet, path, nil)
	if ver != "" {
		req.Header.Set(web.IronicVersionHeader, ver)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	require.NoError(a.t, json.Unmarshal(raw, &out), string(raw))
	return resp.StatusCode, out
}

// faultOf extracts Ironic's faultstring from an error body.
func faultOf(t *testing.T, body map[string]any) string {
	t.Helper()
	s, ok := body["error_message"].(string)
	require.True(t, ok, "not an Ironic error body: %v", body)
	var inner struct{ Faultstring, Faultcode string }
	require.NoError(t, json.Unmarshal([]byte(s), &inner))
	return inner.Faultstring
}

func sortedKeys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func hostnames(t *testing.T, body map[string]any) []string {
	t.Helper()
	var out []string
	for _, c := range body["conductors"].([]any) {
		out = append(out, c.(map[string]any)["hostname"].(string))
	}
	return out
}

func TestConductorAPIVersionGate(t *testing.T) {
	t.Parallel()
	a := setupConductorAPI(t, HandlerOptions{})
	a.addConductor("c1", "", true, 0)
	for _, path := range []string{"/v1/conductors", "/v1/conductors/c1", "/v1/conductors/nope"} {
		for _, ver := range []string{"", "1.48"} {
			st, body := a.get(path, ver)
			require.Equal(t, 404, st, path)
			require.Equal(t, "Resource could not be found.", faultOf(t, body))
		}
	}
	st, _ := a.get("/v1/conductors", "1.49")
	require.Equal(t, 200, st)
	st, _ = a.get("/v1/conductors/c1", "1.49")
	require.Equal(t, 200, st)
	// Other methods: 405 in Ironic's error body, at any version.
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		for _, path := range []string{"/v1/conductors", "/v1/conductors/c1"} {
			req, _ := http.NewRequest(m, a.srv.URL+path, strings.NewReader("{}"))
			req.Header.Set(web.IronicVersionHeader, "1.49")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			var body map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			resp.Body.Close()
			require.Equal(t, 405, resp.StatusCode, m+" "+path)
			require.Equal(t, "GET", resp.Header.Get("Allow"))
			require.NotEmpty(t, faultOf(t, body))
		}
	}
}

func TestConductorAPIShow(t *testing.T) {
	t.Parallel()
	a := setupConductorAPI(t, HandlerOptions{PublicEndpoint: "http://api.example:6385/"})
	a.addConductor("cond-1.example", "rack1", true, 5*time.Second, "fake-hardware")
	a.addConductor("stale", "", true, 2*time.Minute)
	a.addConductor("gone", "", false, time.Second)

	st, body := a.get("/v1/conductors/cond-1.example", "1.49")
	require.Equal(t, 200, st, body)
	require.Equal(t, []string{"alive", "conductor_group", "created_at", "drivers", "hostname", "links", "updated_at"}, sortedKeys(body))
	require.Equal(t, "cond-1.example", body["hostname"])
	require.Equal(t, "rack1", body["conductor_group"])
	require.Equal(t, true, body["alive"])
	require.Equal(t, []any{"fake-hardware"}, body["drivers"])
	require.Equal(t, []any{
		map[string]any{"href": "http://api.example:6385/v1/conductors/cond-1.example", "rel": "self"},
		map[string]any{"href": "http://api.example:6385/conductors/cond-1.example", "rel": "bookmark"},
	}, body["links"])
	for _, k := range []string{"created_at", "updated_at"} {
		ts, err := time.Parse(time.RFC3339Nano, body[k].(string))
		require.NoError(t, err, k)
		require.WithinDuration(t, time.Now(), ts, time.Minute, k)
		require.True(t, strings.HasSuffix(body[k].(string), "+00:00"), body[k])
	}

	// An expiry passed (a heartbeat older than its timeout), or a clean stop: not alive,
	// still shown.
	for _, h := range []string{"stale", "gone"} {
		st, body = a.get("/v1/conductors/"+h, "latest")
		require.Equal(t, 200, st, body)
		require.Equal(t, false, body["alive"], h)
		require.Equal(t, []any{}, body["drivers"], h)
	}

	st, body = a.get("/v1/conductors/cond-1.example?fields=hostname,alive", "1.49")
	require.Equal(t, 200, st, body)
	require.Equal(t, []string{"alive", "hostname", "links"}, sortedKeys(body))

	st, body = a.get("/v1/conductors/nope", "1.49")
	require.Equal(t, 404, st)
	require.Equal(t, "Conductor nope could not be found.", faultOf(t, body))

	st, body = a.get("/v1/conductors/a%20b", "1.49")
	require.Equal(t, 400, st)
	require.Equal(t, "Expected name for hostname: a b", faultOf(t, body))

	st, body = a.get("/v1/conductors/cond-1.example?fields=hostname,bogus", "1.49")
	require.Equal(t, 400, st)
	require.Equal(t, `Field(s) "bogus" are not valid`, faultOf(t, body))

	// Node fields newer than the request version are 406, as in Ironic.
	st, body = a.get("/v1/conductors/cond-1.example?fields=shard", "1.81")
	require.Equal(t, 406, st, body)
	st, body = a.get("/v1/conductors/cond-1.example?fields=shard", "1.82")
	require.Equal(t, 400, st, body)
}

func TestConductorAPIList(t *testing.T) {
	t.Parallel()
	a := setupConductorAPI(t, HandlerOptions{})
	a.addConductor("c-b", "g2", true, 0, "fake-hardware")
	a.addConductor("c-a", "g1", false, 0)
	a.addConductor("c-c", "g1", true, 10*time.Minute)

	st, body := a.get("/v1/conductors", "1.49")
	require.Equal(t, 200, st, body)
	require.Equal(t, []string{"conductors"}, sortedKeys(body))
	require.Equal(t, []string{"c-b", "c-a", "c-c"}, hostnames(t, body)) // by id
	first := body["conductors"].([]any)[0].(map[string]any)
	require.Equal(t, []string{"alive", "conductor_group", "hostname", "links"}, sortedKeys(first))
	var alive []bool
	for _, c := range body["conductors"].([]any) {
		alive = append(alive, c.(map[string]any)["alive"].(bool))
	}
	require.Equal(t, []bool{true, false, false}, alive)

	st, body = a.get("/v1/conductors?detail=True", "1.49")
	require.Equal(t, 200, st, body)
	first = body["conductors"].([]any)[0].(map[string]any)
	require.Equal(t, []string{"alive", "conductor_group", "created_at", "drivers", "hostname", "links", "updated_at"}, sortedKeys(first))
	st, body = a.get("/v1/conductors?detail=false", "1.49")
	require.Equal(t, 200, st, body)
	require.Len(t, body["conductors"].([]any)[0].(map[string]any), 4)

	st, body = a.get("/v1/conductors?fields=hostname,drivers", "1.49")
	require.Equal(t, 200, st, body)
	require.Equal(t, []string{"drivers", "hostname", "links"}, sortedKeys(body["conductors"].([]any)[0].(map[string]any)))

	// Sorting.
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"sort_key=hostname", []string{"c-a", "c-b", "c-c"}},
		{"sort_key=hostname&sort_dir=desc", []string{"c-c", "c-b", "c-a"}},
		{"sort_key=conductor_group", []string{"c-a", "c-c", "c-b"}},
		{"sort_key=conductor_group&sort_dir=desc", []string{"c-b", "c-c", "c-a"}},
		{"sort_key=online", []string{"c-a", "c-b", "c-c"}},
		{"sort_key=id&sort_dir=desc", []string{"c-c", "c-a", "c-b"}},
		{"sort_key=created_at", []string{"c-b", "c-a", "c-c"}},
		{"sort_key=updated_at", []string{"c-c", "c-b", "c-a"}},
	} {
		st, body := a.get("/v1/conductors?"+tc.query, "1.49")
		require.Equal(t, 200, st, body)
		if tc.query == "sort_key=updated_at" {
			// c-c's heartbeat is 10 minutes old; c-b and c-a were touched now.
			require.Equal(t, "c-c", hostnames(t, body)[0])
			continue
		}
		require.Equal(t, tc.want, hostnames(t, body), tc.query)
	}

	// Paging: every order, one row per page, following next links.
	for _, q := range []string{"", "sort_key=hostname", "sort_key=hostname&sort_dir=desc", "sort_key=conductor_group",
		"sort_key=online&sort_dir=desc", "sort_key=updated_at", "sort_key=created_at&sort_dir=desc", "detail=True"} {
		st, all := a.get("/v1/conductors?"+q, "1.49")
		require.Equal(t, 200, st, all)
		var paged []string
		next := "/v1/conductors?limit=1&" + q
		for i := 0; next != ""; i++ {
			require.Less(t, i, 10, "paging does not end: %s", q)
			st, body := a.get(next, "1.49")
			require.Equal(t, 200, st, body)
			paged = append(paged, hostnames(t, body)...)
			next, _ = body["next"].(string)
			if next != "" {
				require.Contains(t, next, "limit=1")
				require.Contains(t, next, "marker=")
			}
		}
		require.Equal(t, hostnames(t, all), paged, q)
	}

	// The next link repeats sort_key, sort_dir, detail and fields.
	st, body = a.get("/v1/conductors?limit=2&sort_key=hostname", "1.49")
	require.Equal(t, 200, st, body)
	next := body["next"].(string)
	require.True(t, strings.HasPrefix(next, a.srv.URL+"/v1/conductors?"), next)
	for _, want := range []string{"sort_key=hostname", "sort_dir=asc", "fields=hostname%2Cconductor_group%2Calive", "limit=2", "marker=c-b"} {
		require.Contains(t, next, want)
	}
	st, body = a.get("/v1/conductors?limit=2&detail=True", "1.49")
	require.Equal(t, 200, st, body)
	require.Contains(t, body["next"], "detail=True")
	require.NotContains(t, body["next"], "fields=")
	st, body = a.get("/v1/conductors?limit=3", "1.49")
	require.Equal(t, 200, st, body)
	require.Contains(t, body, "next") // a full page always links on, as Ironic
	st, body = a.get("/v1/conductors?limit=4", "1.49")
	require.Equal(t, 200, st, body)
	require.NotContains(t, body, "next")
}

func TestConductorAPIListErrors(t *testing.T) {
	t.Parallel()
	a := setupConductorAPI(t, HandlerOptions{})
	a.addConductor("c1", "", true, 0)
	for _, tc := range []struct {
		query, ver string
		status     int
		fault      string
	}{
		{"sort_key=alive", "1.49", 400, "The sort_key value alive is an invalid field for sorting"},
		{"sort_key=drivers", "1.49", 400, "The sort_key value drivers is an invalid field for sorting"},
		{"sort_key=bogus", "1.49", 400, `The sort_key value "bogus" is an invalid field for sorting`},
		{"sort_key=shard", "1.81", 406, "Request not acceptable."},
		{"sort_key=owner", "1.49", 406, "Request not acceptable."},
		{"sort_key=owner", "1.50", 400, `The sort_key value "owner" is an invalid field for sorting`},
		{"sort_dir=up", "1.49", 400, "Invalid sort direction: up. Acceptable values are 'asc' or 'desc'"},
		{"limit=0", "1.49", 400, "Limit must be positive"},
		{"limit=-3", "1.49", 400, "Limit must be positive"},
		{"marker=nope", "1.49", 404, "Conductor nope could not be found."},
		{"marker=a%20b", "1.49", 400, "Expected name for marker: a b"},
		{"detail=maybe", "1.49", 400, "Invalid detail: Unrecognized value 'maybe', acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'"},
		{"detail=True&fields=hostname", "1.49", 400, "Can not specify ?detail=True and fields in the same request."},
		{"fields=hostname,bogus", "1.49", 400, `Field(s) "bogus" are not valid`},
	} {
		st, body := a.get("/v1/conductors?"+tc.query, tc.ver)
		require.Equal(t, tc.status, st, "%s: %v", tc.query, body)
		require.Equal(t, tc.fault, faultOf(t, body), tc.query)
	}
	// Bad input is never a 500.
	st, body := a.get("/v1/conductors?limit=abc", "1.49")
	require.Equal(t, 400, st, body)
	st, body = a.get("/v1/conductors?detail=false&fields=hostname", "1.49")
	require.Equal(t, 200, st, body)
	st, body = a.get("/v1/conductors?limit=99999999999", "1.49")
	require.Equal(t, 200, st, body)
}

// TestConductorAPIShowsRegisteredConductor checks the endpoints against a
// conductor the Service registered itself, before and after a clean stop.
func TestConductorAPIShowsRegisteredConductor(t *testing.T) {
	t.Parallel()
	a := setupConductorAPI(t, HandlerOptions{})
	svc, err := conductor.NewService(conductor.Config{Hostname: "svc-1", Group: "grp"}, a.pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ready, errc := make(chan struct{}), make(chan error, 1)
	svc.OnReady = func() { close(ready) }
	go func() { errc <- svc.Run(ctx) }()
	<-ready
	stop := func() error { cancel(); return <-errc }
	st, body := a.get("/v1/conductors/svc-1", "1.49")
	require.Equal(t, 200, st, body)
	require.Equal(t, true, body["alive"])
	require.Equal(t, "grp", body["conductor_group"])
	require.NoError(t, stop())
	st, body = a.get("/v1/conductors?detail=True", "1.49")
	require.Equal(t, 200, st, body)
	require.Equal(t, []string{"svc-1"}, hostnames(t, body))
	require.Equal(t, false, body["conductors"].([]any)[0].(map[string]any)["alive"])
}

// TestUIConductorStates: GET /v1/ui/conductors tells a conductor stopped
// cleanly (offline) from a dead one (online, heartbeat run out), as
// metalloc_conductors_dead counts them; GET /v1/conductors says alive
// false for both.
func TestUIConductorStates(t *testing.T) {
	t.Parallel()
	a := setupConductorAPI(t, HandlerOptions{})
	a.addConductor("c-alive", "g1", true, 5*time.Second)
	a.addConductor("c-dead", "", true, 2*time.Minute)
	a.addConductor("c-stopped", "", false, time.Second)

	st, body := a.get("/v1/ui/conductors", "")
	require.Equal(t, 200, st, body)
	states, ages := map[string]string{}, map[string]any{}
	for _, c := range body["conductors"].([]any) {
		m := c.(map[string]any)
		states[m["hostname"].(string)] = m["state"].(string)
		ages[m["hostname"].(string)] = m["heartbeat_age"]
		require.NotEmpty(t, m["updated_at"])
	}
	require.Equal(t, map[string]string{"c-alive": "alive", "c-dead": "dead", "c-stopped": "stopped"}, states)
	require.InDelta(t, 5, ages["c-alive"], 5)
	for _, c := range body["conductors"].([]any) {
		require.Equal(t, "", c.(map[string]any)["drain"], "no drain asked")
	}
	require.InDelta(t, 120, ages["c-dead"], 5)
	require.Nil(t, ages["c-stopped"])

	// The same conductors through Ironic's API: not alive, both.
	st, body = a.get("/v1/conductors", "1.49")
	require.Equal(t, 200, st)
	alive := map[string]bool{}
	for _, c := range body["conductors"].([]any) {
		m := c.(map[string]any)
		alive[m["hostname"].(string)] = m["alive"].(bool)
	}
	require.Equal(t, map[string]bool{"c-alive": true, "c-dead": false, "c-stopped": false}, alive)

	// An alive conductor asked to drain (`metalloc-manage conductor
	// drain`) is draining, then drained; a dead one's request shows
	// nothing (it is dead).
	_, err := a.pool.Exec(context.Background(), `UPDATE conductors SET drain_requested_at = now() WHERE hostname IN ('c-alive', 'c-dead')`)
	require.NoError(t, err)
	drains := func() map[string]any {
		_, body := a.get("/v1/ui/conductors", "")
		out := map[string]any{}
		for _, c := range body["conductors"].([]any) {
			out[c.(map[string]any)["hostname"].(string)] = c.(map[string]any)["drain"]
		}
		return out
	}
	require.Equal(t, map[string]any{"c-alive": "draining", "c-dead": "", "c-stopped": ""}, drains())
	_, err = a.pool.Exec(context.Background(), `UPDATE conductors SET drained_at = now() WHERE hostname = 'c-alive'`)
	require.NoError(t, err)
	require.Equal(t, "drained", drains()["c-alive"])

	// And the metric counts the dead one only.
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(a.pool))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	gauges := map[string]float64{}
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 1 {
			gauges[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	require.Equal(t, 1.0, gauges["metalloc_conductors_dead"])
	require.Equal(t, 1.0, gauges["metalloc_conductors_alive"])
}
