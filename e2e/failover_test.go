package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/db/embedded"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/internal/pgtest"
)

// PostgreSQL failover: a primary and a synchronous streaming standby, the API
// and two conductors on the multi-host URL with target_session_attrs=
// read-write, allocation load through the API; the primary is SIGKILLed mid-
// run and the standby promoted. Every allocation that got its 201 must
// survive and end active on a node of its own, nothing is double-booked,
// clients see 503 (never 500, never a hang) until the new primary answers,
// and the figures are logged.
func TestFailoverToSynchronousStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own primary and standby")
	}
	ctx := context.Background()
	log := zaptest.NewLogger(t)
	// synchronous_commit on; once the standby streams, any standby is
	// synchronous: a commit returns only once the standby has the WAL.
	syncRep := map[string]string{"synchronous_commit": "on"}
	const nodes = 600
	primary, dir := privateCluster(t, syncRep, nodes, "fo")
	standby, err := pgtest.StartStandby(ctx, primary, filepath.Join(dir, "standby1"), embedded.Options{Settings: syncRep})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop(context.Background()) })
	admin, err := db.Open(ctx, primary.URL("postgres"), db.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '*'`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	dbtest.WaitFor(t, 30*time.Second, "the standby to stream synchronously", func() bool {
		return dbtest.Count(t, admin, `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'`) == 1
	})
	admin.Close()

	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/metalloc?sslmode=disable&target_session_attrs=read-write",
		primary.Port(), standby.Port())
	stack := failoverStack(t, url, log)

	type result struct {
		status     int
		uuid       string
		start, end time.Time
		err        string
	}
	client := &http.Client{Timeout: 15 * time.Second}
	post := func() result {
		r := result{start: time.Now()}
		req, _ := http.NewRequest(http.MethodPost, stack.APIURL+"/v1/allocations", bytes.NewReader([]byte(`{"resource_class": "fo"}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
		resp, err := client.Do(req)
		r.end = time.Now()
		if err != nil {
			r.err = err.Error()
			return r
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		r.status = resp.StatusCode
		if r.status == http.StatusCreated {
			var doc struct{ UUID string }
			_ = json.Unmarshal(raw, &doc)
			r.uuid = doc.UUID
		} else if r.status != http.StatusServiceUnavailable {
			r.err = string(raw)
		}
		return r
	}

	var (
		mu      sync.Mutex
		results []result
		budget  atomic.Int64 // allocations still to create (the nodes bound it)
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	budget.Store(nodes - 50)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if budget.Add(-1) < 0 {
					continue
				}
				r := post()
				if r.status != http.StatusCreated {
					budget.Add(1)
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	firstCreatedAfter := func(t0 time.Time) time.Time {
		mu.Lock()
		defer mu.Unlock()
		var first time.Time
		for _, r := range results {
			if r.status == http.StatusCreated && r.start.After(t0) && (first.IsZero() || r.end.Before(first)) {
				first = r.end
			}
		}
		return first
	}

	dbtest.WaitFor(t, 30*time.Second, "allocations to be created before the failover", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(results) >= 100
	})
	killedAt := time.Now()
	require.NoError(t, pgtest.Kill(ctx, primary))
	// An operator (or Patroni) notices and promotes the standby: once the
	// clients have seen the outage.
	failedSince := func(t0 time.Time) (first time.Time) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range results {
			if r.status != http.StatusCreated && r.start.After(t0) && (first.IsZero() || r.start.Before(first)) {
				first = r.start
			}
		}
		return first
	}
	dbtest.WaitFor(t, 60*time.Second, "a client to see the outage", func() bool {
		return !failedSince(killedAt).IsZero()
	})
	promoteAt := time.Now()
	require.NoError(t, pgtest.Promote(ctx, standby))
	promotedAt := time.Now()
	dbtest.WaitFor(t, 60*time.Second, "a 201 from the new primary", func() bool {
		return !firstCreatedAfter(promotedAt).IsZero()
	})
	// The failover time: from the kill to the first 201 that follows the
	// first failure after it (a request in flight at the kill may still have
	// committed on the old primary, and been replicated).
	recoveredAt := firstCreatedAfter(failedSince(killedAt))
	// Keep the load on for 50 more allocations on the new primary, then
	// stop it.
	dbtest.WaitFor(t, 60*time.Second, "50 more allocations on the new primary", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if r.status == http.StatusCreated && r.start.After(recoveredAt) {
				n++
			}
		}
		return n >= 50
	})
	close(stop)
	wg.Wait()

	// What the clients saw: 201 or 503, nothing else.
	statuses := map[int]int{}
	var acked []string
	for _, r := range results {
		statuses[r.status]++
		switch r.status {
		case http.StatusCreated:
			acked = append(acked, r.uuid)
		case http.StatusServiceUnavailable:
		default:
			t.Errorf("POST at %s (%s after the kill): status %d, error %q",
				r.start.Format(time.StampMilli), r.start.Sub(killedAt), r.status, r.err)
		}
	}

	// Every acknowledged allocation is on the new primary and ends active.
	pool, err := db.Open(ctx, standby.URL("metalloc"), db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	dbtest.WaitFor(t, 60*time.Second, "every allocation to leave allocating", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
	})
	var lost []string
	for _, u := range acked {
		if dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE uuid = $1 AND state = 'active'`, u) != 1 {
			lost = append(lost, u)
		}
	}
	require.Empty(t, lost, "acknowledged allocations lost or not active after the failover")
	broken := dbtest.Broken(t, pool)
	require.Empty(t, broken, "invariants after the failover")
	doubleBooked := dbtest.Count(t, pool, `SELECT count(*) FROM (SELECT node_id FROM allocations
		WHERE node_id IS NOT NULL GROUP BY node_id HAVING count(*) > 1) d`)

	codes := make([]int, 0, len(statuses))
	for c := range statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	t.Logf("failover: primary killed -> first 201 from the new primary %s (the standby promoted %s after the kill, "+
		"pg_ctl promote took %s, first 201 %s after the promotion began); "+
		"POSTs %d, statuses %v (503 meanwhile: %d); acknowledged %d, lost %d, double-booked %d",
		recoveredAt.Sub(killedAt).Round(time.Millisecond), promoteAt.Sub(killedAt).Round(time.Millisecond),
		promotedAt.Sub(promoteAt).Round(time.Millisecond), recoveredAt.Sub(promoteAt).Round(time.Millisecond), len(results), statuses, statuses[http.StatusServiceUnavailable],
		len(acked), len(lost), doubleBooked)
}

// failoverStack starts the API and two conductors on url for a failover
// test, stopped at the test's end: requests bounded to 3 s
// (api.request_timeout), and conductors that judge a peer dead 5 s after
// its last heartbeat and look for rows to take over every second, so that
// the failover, not the defaults' minute, is what the figures measure.
func failoverStack(t *testing.T, url string, log *zap.Logger) *devstack.Stack {
	t.Helper()
	stack, err := devstack.Start(context.Background(), devstack.Options{
		BinDir: binDir, DatabaseURL: url, Conductors: 2, LogDir: t.TempDir(), Log: log,
		Env: []string{"METALLOC_LOG_LEVEL=info", "METALLOC_API_REQUEST_TIMEOUT=3s",
			"METALLOC_CONDUCTOR_HEARTBEAT_INTERVAL=500ms", "METALLOC_CONDUCTOR_HEARTBEAT_TIMEOUT=5s",
			"METALLOC_CONDUCTOR_TAKEOVER_SCHEDULE=@every 1s"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { stack.Stop(context.Background()) })
	return stack
}
