package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// Shape of the PostgreSQL restart test.
const (
	pgrNodes      = 500                   // available nodes enrolled
	pgrBudget     = 450                   // most allocations created, so every one fits
	pgrWriters    = 4                     // goroutines POSTing allocations
	pgrPause      = 40 * time.Millisecond // each writer's pause between POSTs
	pgrWarmup     = 30                    // allocations created before the stop
	pgrOutage     = 20                    // requests answered while PostgreSQL is down
	pgrAfter      = 40                    // allocations created after the first 201 that follows the restart
	pgrSettleTime = 60 * time.Second      // every created allocation leaves allocating within this
)

// pgrResult is one request the load made.
type pgrResult struct {
	method   string
	start    time.Time
	took     time.Duration
	status   int    // 0: transport error
	body     string // for anything but 200/201
	uuid     string // of a created allocation
	transErr string
}

// TestPostgresRestartUnderLoad stops the database under a running system
// (metalloc-api and two conductors on a private PostgreSQL cluster) while
// clients keep creating allocations, then starts it again. While it is down,
// every request that needs it must get a quick 503 with Ironic's error body
// (refused at once, not after a timeout); afterwards the API must recover by
// itself, every allocation whose POST got 201 must end active on a node of
// its own, and every allocation stored must have had its 201 (one writer
// asks Prefer: wait: a POST whose row is committed is never a 503).
func TestPostgresRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL and stops it")
	}
	ctx := context.Background()

	// A private cluster: the test stops it, so not the shared DATABASE_URL.
	cluster, _ := privateCluster(t, nil, pgrNodes, "pgr")
	dbURL := cluster.URL("metalloc")

	logDir := t.TempDir()
	stack, err := devstack.Start(ctx, devstack.Options{
		BinDir: binDir, DatabaseURL: dbURL, Conductors: 2, LogDir: logDir, Log: zaptest.NewLogger(t),
		Env: []string{"METALLOC_LOG_LEVEL=info"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { stack.Stop(context.Background()) })

	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	do := func(method, path string, body []byte, header ...string) pgrResult {
		r := pgrResult{method: method, start: time.Now()}
		req, _ := http.NewRequest(method, stack.APIURL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		r.took = time.Since(r.start)
		if err != nil {
			r.transErr = err.Error()
			return r
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r.status = resp.StatusCode
		switch r.status {
		case http.StatusCreated:
			var doc struct{ UUID string }
			if err := json.Unmarshal(raw, &doc); err != nil || doc.UUID == "" {
				r.body = string(raw)
			}
			r.uuid = doc.UUID
		case http.StatusOK:
		default:
			r.body = string(raw)
		}
		return r
	}

	// The load: writers POST allocations until told to stop (or the budget
	// is spent); a reader lists allocations.
	var (
		mu       sync.Mutex
		results  []pgrResult
		created  atomic.Int64
		stopLoad = make(chan struct{})
		wg       sync.WaitGroup
	)
	record := func(r pgrResult) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	postBody := []byte(`{"resource_class": "pgr"}`)
	for w := range pgrWriters {
		var header []string
		if w == 0 {
			header = []string{"Prefer", "wait=5"}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopLoad:
					return
				case <-time.After(pgrPause):
				}
				if created.Load() >= pgrBudget {
					continue
				}
				r := do("POST", "/v1/allocations", postBody, header...)
				if r.status == http.StatusCreated {
					created.Add(1)
				}
				record(r)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopLoad:
				return
			case <-time.After(50 * time.Millisecond):
			}
			record(do("GET", "/v1/allocations?limit=5&fields=uuid,state", nil))
		}
	}()

	// count is how many results started after t0 match.
	count := func(t0 time.Time, match func(pgrResult) bool) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if r.start.After(t0) && match(r) {
				n++
			}
		}
		return n
	}
	isCreated := func(r pgrResult) bool { return r.status == http.StatusCreated }
	dbtest.WaitFor(t, 60*time.Second, "allocations created before the stop", func() bool {
		return created.Load() >= pgrWarmup
	})
	stopAt := time.Now()
	require.NoError(t, cluster.Stop(ctx))
	stopped := time.Now()
	dbtest.WaitFor(t, 60*time.Second, "requests answered while PostgreSQL is down", func() bool {
		return count(stopped, func(pgrResult) bool { return true }) >= pgrOutage
	})
	startAt := time.Now()
	require.NoError(t, cluster.StartAgain(ctx))
	started := time.Now()

	// Keep the load on until POSTs succeed again, and a while longer.
	var recovered time.Time
	firstCreated := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range results {
			if r.status == http.StatusCreated && r.start.After(started) &&
				(recovered.IsZero() || r.start.Add(r.took).Before(recovered)) {
				recovered = r.start.Add(r.took)
			}
		}
		return !recovered.IsZero()
	}
	dbtest.WaitFor(t, 60*time.Second, "a POST to succeed after PostgreSQL started again", firstCreated)
	dbtest.WaitFor(t, 60*time.Second, "more allocations created after the restart", func() bool {
		return count(recovered, isCreated) >= pgrAfter || created.Load() >= pgrBudget
	})
	close(stopLoad)
	wg.Wait()
	loadEnd := time.Now()

	// What the clients saw.
	type tally struct {
		n, s503  int
		statuses map[int]int
		lat      []time.Duration
	}
	phase := func(from, to time.Time) tally {
		tl := tally{statuses: map[int]int{}}
		for _, r := range results {
			if r.start.Before(from) || !r.start.Before(to) {
				continue
			}
			tl.n++
			tl.statuses[r.status]++
			if r.status == http.StatusServiceUnavailable {
				tl.s503++
			}
			tl.lat = append(tl.lat, r.took)
		}
		slices.Sort(tl.lat)
		return tl
	}
	pct := func(l []time.Duration, p float64) time.Duration {
		if len(l) == 0 {
			return 0
		}
		return l[min(len(l)-1, int(float64(len(l))*p))]
	}
	before := phase(time.Time{}, stopAt)
	stopping := phase(stopAt, stopped)
	down := phase(stopped, startAt)
	starting := phase(startAt, started)
	after := phase(started, time.Now().Add(time.Hour))
	for _, p := range []struct {
		name string
		tl   tally
	}{{"before", before}, {"stopping", stopping}, {"down", down}, {"starting", starting}, {"after", after}} {
		t.Logf("%-8s requests %4d  503s %4d  statuses %v  latency p50 %v p99 %v max %v",
			p.name, p.tl.n, p.tl.s503, p.tl.statuses, pct(p.tl.lat, .5), pct(p.tl.lat, .99), pct(p.tl.lat, 1))
	}
	t.Logf("pg_ctl stop took %v, start %v; first 201 after the restart %v after pg_ctl start returned (%v after it was called)",
		stopped.Sub(stopAt).Round(time.Millisecond), started.Sub(startAt).Round(time.Millisecond),
		recovered.Sub(started).Round(time.Millisecond), recovered.Sub(startAt).Round(time.Millisecond))

	require.Positive(t, before.statuses[http.StatusCreated], "no allocation created before the outage")
	require.Positive(t, down.n, "no request made while PostgreSQL was down")
	require.Equal(t, down.n, down.s503, "while PostgreSQL was down every request must be a 503: %v", down.statuses)
	// Quick: refused at once, never after waiting out a timeout (no bound
	// on the latency itself, which a loaded machine stretches).
	require.Zero(t, timedOutWhileDown(t, stack.API.LogPath, stopped, startAt),
		"requests made while PostgreSQL was down waited for a timeout instead of being refused at once")

	// Every answer is a success or a 503 in Ironic's body, never a 500 or
	// a transport error, and no 503 shows internals.
	created201 := map[string]bool{}
	for _, r := range results {
		require.Empty(t, r.transErr, "transport error at %v", r.start)
		switch r.status {
		case http.StatusCreated:
			require.NotEmpty(t, r.uuid, "201 without uuid: %s", r.body)
			created201[r.uuid] = true
		case http.StatusOK:
		case http.StatusServiceUnavailable:
			requireIronic503(t, r.body)
		default:
			t.Fatalf("%s at %v (%v after the stop): status %d: %s", r.method, r.start.Format(time.StampMilli),
				r.start.Sub(stopAt), r.status, r.body)
		}
	}

	// Every allocation created (201) ends active, on a node of its own.
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	type row struct {
		uuid, state, lastError string
		node                   *int64
		affinity               *int64
		createdAt              time.Time
	}
	var rows map[string]row
	allocating := 0
	dbtest.WaitEvery(t, pgrSettleTime, 100*time.Millisecond, "every allocation to leave allocating", func() bool {
		rows = map[string]row{}
		q, err := conn.Query(ctx, `SELECT uuid::text, state, coalesce(last_error, ''), node_id, conductor_affinity, created_at FROM allocations`)
		require.NoError(t, err)
		allocating = 0
		for q.Next() {
			var r row
			require.NoError(t, q.Scan(&r.uuid, &r.state, &r.lastError, &r.node, &r.affinity, &r.createdAt))
			rows[r.uuid] = r
			if r.state == "allocating" {
				allocating++
			}
		}
		require.NoError(t, q.Err())
		return allocating == 0
	}, func() { t.Logf("%d allocations still allocating", allocating) })
	settled := time.Now()

	var lost, notActive []string
	states := map[string]int{}
	for u := range created201 {
		r, ok := rows[u]
		if !ok {
			lost = append(lost, u)
			continue
		}
		states[r.state]++
		if r.state != "active" {
			notActive = append(notActive, fmt.Sprintf("%s state=%s conductor_affinity=%s created=%s last_error=%q",
				u, r.state, ptrString(r.affinity), r.createdAt.Format(time.StampMilli), r.lastError))
		}
	}
	extra := map[string]int{} // rows whose POST did not get a 201 (a 503 after commit)
	for u, r := range rows {
		if !created201[u] {
			extra[r.state]++
		}
	}
	t.Logf("allocations: 201s %d (states %v), rows without a 201 %v; none allocating %v after the load stopped",
		len(created201), states, extra, settled.Sub(loadEnd).Round(time.Millisecond))

	var doubles int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT node_id FROM allocations
		WHERE node_id IS NOT NULL GROUP BY node_id HAVING count(*) > 1) d`).Scan(&doubles))
	var mismatched int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM allocations a
		FULL JOIN nodes n ON n.allocation_id = a.id
		WHERE (a.state = 'active' OR n.allocation_id IS NOT NULL)
		  AND (a.id IS NULL OR n.id IS NULL OR a.node_id IS DISTINCT FROM n.id OR n.instance_uuid IS DISTINCT FROM a.uuid)`).Scan(&mismatched))
	t.Logf("double-booked nodes %d, allocation/node links out of step %d", doubles, mismatched)

	summarizeLogs(t, stack)
	if len(lost) > 0 || len(notActive) > 0 {
		dumpPGRestart(t, conn, stack, lost, notActive)
	}
	require.Empty(t, lost, "allocations answered 201 but missing from the database")
	require.Empty(t, extra, "allocations stored whose POST did not get a 201 (a client retrying holds two nodes)")
	require.Empty(t, notActive, "allocations answered 201 that did not end active")
	require.Zero(t, doubles, "nodes booked twice")
	require.Zero(t, mismatched, "nodes and allocations that do not point at each other")

	// The API's own metrics agree with what the clients saw.
	text := fetchText(t, client, stack.APIURL+"/metrics")
	require.Contains(t, text, fmt.Sprintf("metalloc_allocations_created_total %d\n", len(created201)))
	n503 := 0
	for _, r := range results {
		if r.method == "POST" && r.status == http.StatusServiceUnavailable {
			n503++
		}
	}
	require.Contains(t, text, fmt.Sprintf(`metalloc_http_requests_total{method="POST",route="/v1/allocations",status="503"} %d`+"\n", n503))
	require.Contains(t, text, "metalloc_db_pool_max_connections ")
	for _, p := range stack.Conductors {
		require.False(t, p.Exited(), "conductor %s exited; see %s", p.Name, p.LogPath)
	}
}

// requireIronic503 checks body is Ironic's error document for a 503:
// {"error_message": "{\"faultstring\": ..., \"faultcode\": \"Server\", \"debuginfo\": null}"},
// with the generic message and nothing of the underlying error.
func requireIronic503(t *testing.T, body string) {
	t.Helper()
	var outer map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &outer), body)
	var inner map[string]any
	require.NoError(t, json.Unmarshal([]byte(outer["error_message"]), &inner), body)
	require.Equal(t, "Server", inner["faultcode"], body)
	require.Contains(t, inner, "debuginfo", body)
	require.Nil(t, inner["debuginfo"], body)
	require.Equal(t, "The database is temporarily unavailable; retry later.", inner["faultstring"], body)
}

func fetchText(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	return string(raw)
}

// dumpPGRestart logs what a person needs to see why allocations were lost
// or stuck: the rows, the conductors, and the tail of every process log.
func dumpPGRestart(t *testing.T, conn *pgx.Conn, stack *devstack.Stack, lost, notActive []string) {
	t.Helper()
	ctx := context.Background()
	t.Logf("lost (%d): %v", len(lost), lost)
	for _, s := range notActive {
		t.Logf("not active: %s", s)
	}
	rows, err := conn.Query(ctx, `SELECT id, hostname, online, started_at, heartbeat_at FROM conductors ORDER BY id`)
	if err == nil {
		for rows.Next() {
			var id int64
			var host string
			var online bool
			var startedAt, hb time.Time
			if rows.Scan(&id, &host, &online, &startedAt, &hb) == nil {
				t.Logf("conductor id=%d hostname=%s online=%v started=%s heartbeat=%s", id, host, online,
					startedAt.Format(time.StampMilli), hb.Format(time.StampMilli))
			}
		}
		rows.Close()
	}
	for _, p := range append([]*devstack.Process{stack.API}, stack.Conductors...) {
		raw, err := os.ReadFile(p.LogPath)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		t.Logf("--- %s (exited %v), last %d of %d log lines:\n%s", p.Name, p.Exited(),
			min(40, len(lines)), len(lines), strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

func ptrString(p *int64) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}

// summarizeLogs logs, per process, how many warnings and errors it logged
// and the distinct messages with their counts.
func summarizeLogs(t *testing.T, stack *devstack.Stack) {
	t.Helper()
	for _, p := range append([]*devstack.Process{stack.API}, stack.Conductors...) {
		raw, err := os.ReadFile(p.LogPath)
		if err != nil {
			continue
		}
		counts := map[string]int{}
		for _, line := range strings.Split(string(raw), "\n") {
			var l struct{ Level, Msg string }
			if json.Unmarshal([]byte(line), &l) != nil || (l.Level != "warn" && l.Level != "error") {
				continue
			}
			counts[l.Level+": "+l.Msg]++
		}
		t.Logf("%s log: warnings and errors %v", p.Name, counts)
	}
}

// timedOutWhileDown counts the requests metalloc-api answered 503 for
// because a deadline passed (the pool's acquire or connect timeout) rather
// than because the database refused the connection, among those it logged
// between from and to ("database unavailable" warnings with their error).
func timedOutWhileDown(t *testing.T, logPath string, from, to time.Time) int {
	t.Helper()
	raw, err := os.ReadFile(logPath)
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		var l struct{ Time, Msg, Error string }
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "database unavailable" {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z0700", l.Time)
		if err != nil || at.Before(from) || !at.Before(to) {
			continue
		}
		if strings.Contains(l.Error, "deadline exceeded") || strings.Contains(l.Error, "timeout") {
			t.Logf("timed out while down: %s", line)
			n++
		}
	}
	return n
}
