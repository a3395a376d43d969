package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// Database faults short of losing the server: a conductor's sessions killed
// mid-claim, a conductor whose database sessions stall for longer than the
// heartbeat timeout, and connection slots exhausted by another client. In
// each, every allocation that got a 201 ends active on a node of its own,
// clients see 201 or 503 and never a 500, and nothing is double-booked.

// faultLoad POSTs n allocations of class rc from c clients and returns the
// uuids acknowledged and the statuses seen.
func faultLoad(t *testing.T, apiURL, rc string, n, c int) (acked []string, statuses map[int]int) {
	t.Helper()
	client := &http.Client{Timeout: 20 * time.Second}
	statuses = map[int]int{}
	var mu sync.Mutex
	inParallel(t, n, c, func(int) error {
		for {
			req, _ := http.NewRequest(http.MethodPost, apiURL+"/v1/allocations",
				bytes.NewReader([]byte(fmt.Sprintf(`{"resource_class": %q}`, rc))))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
			resp, err := client.Do(req)
			if err != nil {
				return fmt.Errorf("POST: %w", err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
			switch resp.StatusCode {
			case http.StatusCreated:
				var doc struct{ UUID string }
				if err := json.Unmarshal(raw, &doc); err != nil {
					return err
				}
				mu.Lock()
				acked = append(acked, doc.UUID)
				mu.Unlock()
				return nil
			case http.StatusServiceUnavailable:
				time.Sleep(50 * time.Millisecond) // a client retrying later
			default:
				return fmt.Errorf("POST: status %d: %s", resp.StatusCode, raw)
			}
		}
	})
	return acked, statuses
}

// requireAllActive waits until nothing is allocating, then checks that every
// acknowledged allocation is active and the invariants hold.
func requireAllActive(t *testing.T, pool *pgxpool.Pool, acked []string) {
	t.Helper()
	dbtest.WaitFor(t, 60*time.Second, "every allocation to leave allocating", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
	})
	require.Equal(t, len(acked), dbtest.Count(t, pool,
		`SELECT count(*) FROM allocations WHERE uuid = ANY($1::uuid[]) AND state = 'active'`, acked))
	require.Empty(t, dbtest.Broken(t, pool))
}

// conductorBackends lists the PostgreSQL backends of conductor hostname.
func conductorBackends(t *testing.T, pool *pgxpool.Pool, hostname string) []int {
	rows, err := pool.Query(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, "metalloc-conductor "+hostname)
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out
}

// stallSession stops backend pid (SIGSTOP) where a stalled network
// connection leaves a session: waiting for its client (wait event
// ClientRead, idle or idle in a transaction that holds its row locks). A
// backend stopped in the middle of a statement may hold one of
// PostgreSQL's shared-memory locks (an LWLock such as ProcArrayLock), and
// then every session of the cluster stalls with it, other tests' included
// (once in CI, every new connection hung in authentication): such a stop
// is undone at once and tried again. The check runs while pid is stopped,
// so what it reads is where pid stays. It reports whether pid is left
// stopped: false when it has ended or was never found waiting for its
// client.
func stallSession(t *testing.T, pool *pgxpool.Pool, pid int) bool {
	t.Helper()
	for range 500 {
		if err := syscall.Kill(pid, syscall.SIGSTOP); errors.Is(err, syscall.ESRCH) {
			return false
		} else {
			require.NoError(t, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT coalesce(wait_event = 'ClientRead', false) FROM pg_stat_activity WHERE pid = $1`,
			pid).Scan(&waiting)
		cancel()
		if err == nil && waiting {
			return true
		}
		// Mid-statement (or the check itself waited on a lock pid holds),
		// or gone: let it go on, and try again a moment later.
		if kerr := syscall.Kill(pid, syscall.SIGCONT); errors.Is(kerr, syscall.ESRCH) || errors.Is(err, pgx.ErrNoRows) {
			return false
		}
		time.Sleep(2 * time.Millisecond) // pacing of the retries, not a synchronisation
	}
	return false
}

// A conductor's sessions are terminated (pg_terminate_backend) again and
// again while it claims and reserves: its claims roll back or its rows are
// resumed, and every allocation ends active.
func TestConductorSessionsTerminatedMidClaim(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	pool, err := db.Open(context.Background(), url, db.PoolOptions{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	dbtest.Nodes(t, pool, 400, "term")
	stack, err := devstack.Start(context.Background(), devstack.Options{
		BinDir: binDir, DatabaseURL: url, Conductors: 2, LogDir: t.TempDir(), Log: zaptest.NewLogger(t),
		Env: []string{"METALLOC_LOG_LEVEL=warn"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { stack.Stop(context.Background()) })

	stop := make(chan struct{})
	var killed int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond): // claims last milliseconds: poll often to catch one
			}
			var n int
			_ = pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = 'metalloc-conductor conductor-1' AND state <> 'idle'`).Scan(&n)
			killed += n
		}
	}()
	acked, statuses := faultLoad(t, stack.APIURL, "term", 300, 16)
	close(stop)
	<-done
	requireAllActive(t, pool, acked)
	t.Logf("sessions terminated mid-claim: %d busy conductor-1 sessions killed; POSTs %v; %d acknowledged, all active",
		killed, statuses, len(acked))
}

// Every open session of one conductor stalls mid-work (SIGSTOP of its
// PostgreSQL backends, as a network stall on those connections would) for
// longer than the heartbeat timeout, holding whatever rows they locked: the
// conductor goes on over new sessions, its peer skips the locked rows, and
// when the sessions resume their transactions finish or fail their
// compare-and-set. Every allocation ends active; nothing is double-booked.
func TestConductorSessionsStalledPastHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	pool, err := db.Open(context.Background(), url, db.PoolOptions{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	dbtest.Nodes(t, pool, 300, "stall")
	stack, err := devstack.Start(context.Background(), devstack.Options{
		BinDir: binDir, DatabaseURL: url, Conductors: 2, LogDir: t.TempDir(), Log: zaptest.NewLogger(t),
		Env: []string{"METALLOC_LOG_LEVEL=warn", "METALLOC_CONDUCTOR_HEARTBEAT_INTERVAL=300ms",
			"METALLOC_CONDUCTOR_HEARTBEAT_TIMEOUT=2s", "METALLOC_CONDUCTOR_TAKEOVER_SCHEDULE=@every 1s"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { stack.Stop(context.Background()) })

	var acked []string
	var statuses map[int]int
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		acked, statuses = faultLoad(t, stack.APIURL, "stall", 200, 8)
	}()
	dbtest.WaitFor(t, 30*time.Second, "conductor-1 to be busy", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`) >= 20
	})
	pids := conductorBackends(t, pool, "conductor-1")
	require.NotEmpty(t, pids)
	var stalledDB time.Time // the stall by the database's clock
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&stalledDB))
	// Resumed whatever happens next: a backend left stopped would hold
	// its locks for the tests that follow. A backend that ended since it
	// was listed (its connection closed) is no stall to make.
	defer func() {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGCONT)
		}
	}()
	stopped := 0
	for _, p := range pids {
		if stallSession(t, pool, p) {
			stopped++
		}
	}
	require.NotZero(t, stopped, "no conductor-1 session could be stopped between statements")
	stalledAt := time.Now()
	// The stall lasts longer than the heartbeat timeout (2s), by the
	// database's clock, and conductor-1 has meanwhile either written a
	// heartbeat over a new session (it goes on with its other work; its
	// peer skips whatever the stalled sessions hold locked) or expired (its
	// peer takes its rows over).
	dbtest.WaitEvery(t, 60*time.Second, 50*time.Millisecond, "the stall to outlast the heartbeat timeout", func() bool {
		var past, seen bool
		require.NoError(t, pool.QueryRow(context.Background(), `
			SELECT clock_timestamp() > $1::timestamptz + interval '3 seconds',
			       heartbeat_at > $1 OR NOT metalloc_conductor_alive(online, expires_at)
			  FROM conductors WHERE hostname = 'conductor-1'`, stalledDB).Scan(&past, &seen))
		return past && seen
	})
	for _, p := range pids {
		require.NoError(t, syscall.Kill(p, syscall.SIGCONT))
	}
	resumedAt := time.Now()
	<-loaded
	requireAllActive(t, pool, acked)
	t.Logf("stalled sessions: %d of conductor-1's %d backends stopped between statements for %s; POSTs %v; %d acknowledged, all active",
		stopped, len(pids), resumedAt.Sub(stalledAt).Round(time.Millisecond), statuses, len(acked))
}

// Another client takes every connection slot the server has left: requests
// that need a new connection get 503 (SQLSTATE 53300) within the acquire
// timeout, never a 500 or a hang, and everything works again once the slots
// are free.
func TestConnectionSlotsExhausted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, _ := privateCluster(t, map[string]string{"max_connections": "40", "superuser_reserved_connections": "0"}, 300, "slots")
	url := cluster.URL("metalloc")
	pool, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	stack, err := devstack.Start(ctx, devstack.Options{
		BinDir: binDir, DatabaseURL: url, Conductors: 1, LogDir: t.TempDir(), Log: zaptest.NewLogger(t),
		Env: []string{"METALLOC_LOG_LEVEL=warn", "METALLOC_DATABASE_MAX_CONNS=12"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { stack.Stop(context.Background()) })

	// The hog: every free slot.
	var hog []*pgx.Conn
	for {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			require.True(t, db.IsUnavailable(err), "%v", err)
			break
		}
		hog = append(hog, c)
	}
	released := false
	release := func() {
		if !released {
			for _, c := range hog {
				_ = c.Close(ctx)
			}
			released = true
		}
	}
	t.Cleanup(release)
	// With the slots taken, a burst wider than the API's open connections.
	start := time.Now()
	during := map[int]int{}
	var mu sync.Mutex
	inParallel(t, 60, 30, func(int) error {
		req, _ := http.NewRequest(http.MethodPost, stack.APIURL+"/v1/allocations",
			bytes.NewReader([]byte(`{"resource_class": "slots"}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		mu.Lock()
		during[resp.StatusCode]++
		mu.Unlock()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	burst := time.Since(start)
	release()
	acked, after := faultLoad(t, stack.APIURL, "slots", 100, 8)
	requireAllActive(t, pool, acked)
	t.Logf("connection slots exhausted: %d hogged; burst of 60 POSTs answered %v in %s; after release %v",
		len(hog), during, burst.Round(time.Millisecond), after)
}
