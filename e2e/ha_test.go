package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/noauth"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/allocations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// Short HA timings for the process tests: a conductor is dead 3 s after its
// last heartbeat, and peers look for dead conductors every second.
const (
	haHeartbeatTimeout = 3 * time.Second
	haTakeoverPeriod   = time.Second
)

var haEnv = []string{
	// debug: the conductors' "reserving allocation" lines are the events
	// the tests wait for (the conductor's test signals, as a process).
	"METALLOC_LOG_LEVEL=debug",
	"METALLOC_CONDUCTOR_HEARTBEAT_INTERVAL=500ms",
	"METALLOC_CONDUCTOR_HEARTBEAT_TIMEOUT=" + haHeartbeatTimeout.String(),
	"METALLOC_CONDUCTOR_TAKEOVER_SCHEDULE=@every " + haTakeoverPeriod.String(),
	"METALLOC_CONDUCTOR_SHUTDOWN_GRACE=1s",
	// Allocations whose nodes the test holds locked keep waiting for them
	// (instead of failing after the default 2 s), so that conductors own
	// unfinished rows when they die.
	"METALLOC_CONDUCTOR_LOCKED_NODE_WAIT=120s",
	"METALLOC_CONDUCTOR_WORKERS=24",
}

// haStack starts metalloc-api and n conductors on a fresh database and
// returns the stack, a gophercloud client and a pool on the same database.
func haStack(t *testing.T, n int) (*devstack.Stack, *gophercloud.ServiceClient, *pgxpool.Pool) {
	t.Helper()
	return haStackEnv(t, n, haEnv)
}

// haStackEnv is haStack with the conductors' environment env.
func haStackEnv(t *testing.T, n int, env []string) (*devstack.Stack, *gophercloud.ServiceClient, *pgxpool.Pool) {
	t.Helper()
	url := dbtest.NewURL(t)
	pool, err := db.Open(context.Background(), url, db.PoolOptions{MaxConns: 8, ApplicationName: "ha-test"})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	stack, err := devstack.Start(context.Background(), devstack.Options{
		BinDir: binDir, DatabaseURL: url, Conductors: n, LogDir: t.TempDir(),
		Log: zaptest.NewLogger(t), Env: env,
	})
	require.NoError(t, err)
	t.Cleanup(func() { stack.Stop(context.Background()) })
	client, err := noauth.NewBareMetalNoAuth(noauth.EndpointOpts{IronicEndpoint: stack.APIURL + "/v1"})
	require.NoError(t, err)
	client.Microversion = "1.82"
	return stack, client, pool
}

// addAvailableNodes enrolls n available nodes of resource class rc directly
// in the database (the API path is covered by TestEndToEndAllocations).
// lockNodes holds every node of class rc locked (FOR UPDATE) until the
// returned release is called: conductors skip locked nodes, so allocations
// for rc stay claimed and allocating meanwhile.
func lockNodes(t *testing.T, pool *pgxpool.Pool, rc string) (release func()) {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), `SELECT id FROM nodes WHERE resource_class = $1 FOR UPDATE`, rc)
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(context.Background()) }) }
	t.Cleanup(release)
	return release
}

func queryInt(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// conductorID is the conductors.id of the conductor named hostname.
func conductorID(t *testing.T, pool *pgxpool.Pool, hostname string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT id FROM conductors WHERE hostname = $1`, hostname).Scan(&id))
	return id
}

// checkInvariants asserts what must hold whatever happened to the
// conductors: no node booked twice, every active allocation held by its
// node (and the node by it), no row left allocating.
func checkInvariants(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Zero(t, queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`))
	require.Zero(t, queryInt(t, pool, `
		SELECT count(*) FROM (SELECT node_id FROM allocations WHERE node_id IS NOT NULL
		                       GROUP BY node_id HAVING count(*) > 1) d`), "nodes booked twice")
	require.Zero(t, queryInt(t, pool, `
		SELECT count(*) FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id
		 WHERE a.state = 'active'
		   AND (n.id IS NULL OR n.allocation_id IS DISTINCT FROM a.id OR n.instance_uuid IS DISTINCT FROM a.uuid)`),
		"active allocations whose node does not hold them")
	require.Zero(t, queryInt(t, pool, `
		SELECT count(*) FROM nodes n LEFT JOIN allocations a ON a.id = n.allocation_id
		 WHERE n.allocation_id IS NOT NULL AND (a.state IS DISTINCT FROM 'active' OR a.node_id IS DISTINCT FROM n.id)`),
		"nodes holding an allocation that is not active on them")
}

// Three real conductor processes serve 2,000 allocations arriving
// continuously over 3,000 nodes; one is SIGKILLed and one SIGTERMed mid-run.
// Twenty allocations ask for a class whose 10 nodes the test holds locked,
// so conductors own unfinished rows when they die.
func TestConductorsSurviveKillAndStop(t *testing.T) {
	if testing.Short() {
		t.Skip("process HA test")
	}
	stack, client, pool := haStack(t, 3)
	dbtest.Nodes(t, pool, 1500, "gold")
	dbtest.Nodes(t, pool, 1490, "silver")
	dbtest.Nodes(t, pool, 10, "blocked")
	release := lockNodes(t, pool, "blocked")
	ctx := context.Background()

	const total, blocked = 2000, 20
	var posted atomic.Int64
	var created sync.Map // uuid -> struct{}
	post := func(rc string) error {
		a, err := allocations.Create(ctx, client, allocations.CreateOpts{ResourceClass: rc}).Extract()
		if err != nil {
			return err
		}
		created.Store(a.UUID, struct{}{})
		posted.Add(1)
		return nil
	}
	for range blocked {
		require.NoError(t, post("blocked"))
	}
	dbtest.WaitFor(t, 10*time.Second, "blocked allocations claimed", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE resource_class = 'blocked' AND conductor_affinity IS NOT NULL`) == blocked
	})

	// The rest arrive continuously from 8 clients, about 400/s, while the
	// conductors die.
	var wg sync.WaitGroup
	errs := make(chan error, total)
	next := make(chan int, total)
	for i := blocked; i < total; i++ {
		next <- i
	}
	close(next)
	tick := time.NewTicker(2500 * time.Microsecond)
	defer tick.Stop()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				<-tick.C
				rc := "gold"
				if i%2 == 1 {
					rc = "silver"
				}
				if err := post(rc); err != nil {
					errs <- fmt.Errorf("POST %d: %w", i, err)
				}
			}
		}()
	}

	// Kill the conductor that owns the most unfinished rows, a third of the
	// way in.
	dbtest.WaitFor(t, 30*time.Second, "a third posted", func() bool { return posted.Load() >= total/3 })
	byName := map[string]*devstack.Process{}
	for _, p := range stack.Conductors {
		byName[p.Name] = p
	}
	var victim string
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT c.hostname FROM conductors c JOIN allocations a ON a.conductor_affinity = c.id
		 WHERE a.state = 'allocating' GROUP BY c.hostname ORDER BY count(*) DESC, c.hostname LIMIT 1`).Scan(&victim))
	victimID := conductorID(t, pool, victim)
	require.NoError(t, byName[victim].Signal(syscall.SIGKILL))
	killedAt := time.Now()
	owned := queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating' AND conductor_affinity = $1`, victimID)
	require.NotZero(t, owned)
	t.Logf("SIGKILLed %s owning %d unfinished allocations", victim, owned)

	// Stop another one cleanly two thirds of the way in.
	dbtest.WaitFor(t, 30*time.Second, "two thirds posted", func() bool { return posted.Load() >= 2*total/3 })
	var stopped string
	for _, p := range stack.Conductors {
		if p.Name != victim {
			stopped = p.Name
			break
		}
	}
	require.NoError(t, byName[stopped].Signal(syscall.SIGTERM))
	require.NoError(t, byName[stopped].Wait(10*time.Second), "SIGTERM must end the conductor with status 0")
	require.Zero(t, queryInt(t, pool, `SELECT count(*) FROM conductors WHERE hostname = $1 AND online`, stopped))
	require.Zero(t, queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating' AND conductor_affinity = $1`,
		conductorID(t, pool, stopped)), "a clean stop hands its unfinished rows back")

	// The killed conductor's rows are taken over.
	limit := haHeartbeatTimeout + haTakeoverPeriod
	dbtest.WaitFor(t, limit+60*time.Second, "killed conductor's rows taken over", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating' AND conductor_affinity = $1`, victimID) == 0
	})
	delay := time.Since(killedAt)
	t.Logf("takeover delay after SIGKILL: %s (heartbeat_timeout %s + takeover period %s = %s)",
		delay.Round(time.Millisecond), haHeartbeatTimeout, haTakeoverPeriod, limit)
	// No bound on the delay itself: a loaded machine stretches it (the
	// log line above records it; the wait above fails if it never comes).

	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, total, posted.Load())
	release()

	dbtest.WaitFor(t, 60*time.Second, "every allocation finished", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
	})
	checkInvariants(t, pool)
	n := 0
	created.Range(func(any, any) bool { n++; return true })
	require.Equal(t, total, n)
	require.Equal(t, total, queryInt(t, pool, `SELECT count(*) FROM allocations`), "every created allocation is there")
	require.Equal(t, total-10, queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`))
	// The only errors: the blocked class has 10 nodes for 20 allocations.
	rows, err := pool.Query(ctx, `SELECT resource_class, last_error FROM allocations WHERE state = 'error'`)
	require.NoError(t, err)
	failed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ RC, LastError string }])
	require.NoError(t, err)
	require.Len(t, failed, 10)
	for _, e := range failed {
		require.Equal(t, "blocked", e.RC)
		require.Contains(t, e.LastError, "no node fits: 10 of resource class blocked, 0 available")
	}
	takeovers := logLines(t, stack.Conductors, "took over allocation from dead conductor")
	t.Logf("takeover log lines: %d; rows owned by the killed conductor at its death: %d", takeovers, owned)
	require.GreaterOrEqual(t, takeovers, owned)

	// The surviving conductor's metrics agree.
	var survivor *devstack.Process
	for _, p := range stack.Conductors {
		if p.Name != victim && p.Name != stopped {
			survivor = p
		}
	}
	m := scrape(t, survivor.MetricsURL)
	require.Contains(t, m, "metalloc_conductor_post_to_active_seconds_count")
	require.Contains(t, m, "metalloc_db_pool_connections")
	require.Contains(t, m, "metalloc_conductor_heartbeat_age_seconds")
	t.Logf("survivor %s: takeovers_total %s", survivor.Name, metricValue(m, "metalloc_conductor_takeovers_total"))
}

// scrape returns the Prometheus text exposition at url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(raw)
}

// metricValue is the value of the sample line named exactly name, or "".
func metricValue(exposition, name string) string {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// waitReserving waits until conductor p has started its reservation of
// allocation uuid (its "reserving allocation" debug line, the reserving test
// signal of package conductor).
func waitReserving(t *testing.T, p *devstack.Process, uuid string) {
	t.Helper()
	dbtest.WaitFor(t, 10*time.Second, p.Name+" reserving "+uuid, func() bool {
		raw, err := os.ReadFile(p.LogPath)
		require.NoError(t, err)
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, "reserving allocation") && strings.Contains(line, uuid) {
				return true
			}
		}
		return false
	})
}

// logLines counts the lines containing msg in the processes' logs.
func logLines(t *testing.T, procs []*devstack.Process, msg string) int {
	t.Helper()
	n := 0
	for _, p := range procs {
		raw, err := os.ReadFile(p.LogPath)
		require.NoError(t, err)
		n += strings.Count(string(raw), msg)
	}
	return n
}

// A conductor paused (SIGSTOP) past the heartbeat timeout loses its row to a
// peer after its expiry (issue 41's must-show); once resumed (SIGCONT) it goes on with the row, and its late write
// is rejected by the conductor_affinity guard.
func TestPausedConductorLosesItsRowsAndCannotOverwrite(t *testing.T) {
	if testing.Short() {
		t.Skip("process HA test")
	}
	stack, client, pool := haStack(t, 2)
	dbtest.Nodes(t, pool, 3, "blocked")
	release := lockNodes(t, pool, "blocked")
	ctx := context.Background()
	a, err := allocations.Create(ctx, client, allocations.CreateOpts{ResourceClass: "blocked"}).Extract()
	require.NoError(t, err)
	var owner string
	dbtest.WaitFor(t, 10*time.Second, "allocation claimed", func() bool {
		err := pool.QueryRow(ctx, `SELECT c.hostname FROM allocations a JOIN conductors c ON c.id = a.conductor_affinity
		                            WHERE a.uuid = $1`, a.UUID).Scan(&owner)
		return err == nil
	})
	var paused, peer *devstack.Process
	for _, p := range stack.Conductors {
		if p.Name == owner {
			paused = p
		} else {
			peer = p
		}
	}
	// Let it get into its reservation loop (it retries while the nodes are
	// locked) before pausing it there.
	waitReserving(t, paused, a.UUID)
	require.NoError(t, paused.Signal(syscall.SIGSTOP))
	pausedAt := time.Now()
	peerID := conductorID(t, pool, peer.Name)
	dbtest.WaitFor(t, haHeartbeatTimeout+haTakeoverPeriod+10*time.Second, "row taken over by the peer", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE uuid = $1 AND conductor_affinity = $2`, a.UUID, peerID) == 1
	})
	t.Logf("%s paused; %s took its allocation over after %s", owner, peer.Name, time.Since(pausedAt).Round(time.Millisecond))
	// After the expiry, not before: a paused process keeps its sessions,
	// so its liveness lock stays held and only the expiry judges it
	// (issue 41; its last heartbeat was at most an interval before the
	// pause).
	require.GreaterOrEqual(t, time.Since(pausedAt), haHeartbeatTimeout-time.Second, "taken over before the expiry")

	// The peer reserves a node once they are free; then the paused one
	// wakes up and tries to finish the same allocation.
	release()
	dbtest.WaitFor(t, 10*time.Second, "allocation active via the peer", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE uuid = $1 AND state = 'active' AND conductor_affinity = $2`, a.UUID, peerID) == 1
	})
	var node string
	require.NoError(t, pool.QueryRow(ctx, `SELECT n.uuid::text FROM allocations a JOIN nodes n ON n.id = a.node_id WHERE a.uuid = $1`, a.UUID).Scan(&node))
	require.NoError(t, paused.Signal(syscall.SIGCONT))
	defer func() {
		if t.Failed() {
			raw, _ := os.ReadFile(paused.LogPath)
			t.Logf("%s log:\n%s", paused.Name, raw)
		}
	}()
	dbtest.WaitFor(t, 10*time.Second, "the resumed conductor's late write rejected", func() bool {
		return logLines(t, []*devstack.Process{paused}, "allocation no longer owned by this conductor") > 0
	})
	var after string
	require.NoError(t, pool.QueryRow(ctx, `SELECT n.uuid::text FROM allocations a JOIN nodes n ON n.id = a.node_id WHERE a.uuid = $1`, a.UUID).Scan(&after))
	require.Equal(t, node, after, "the late write changed nothing")
	require.Equal(t, 1, queryInt(t, pool, `SELECT count(*) FROM nodes WHERE allocation_id IS NOT NULL`))
	checkInvariants(t, pool)
	// Back from the pause, it heartbeats again and counts as alive.
	dbtest.WaitFor(t, 30*time.Second, "resumed conductor alive again", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM conductors WHERE hostname = $1 AND metalloc_conductor_alive(online, expires_at)`, owner) == 1
	})
}

// SIGTERM starts a clean stop; a second SIGTERM ends the conductor at once
// (status 128+15), and its unfinished row is then taken over like a dead
// conductor's. The stop is held by a reservation in flight: the row's
// reservation statement waits for a lock the test holds on the allocation
// row. (A row waiting for a locked node does not hold a stop: it is parked,
// and a stop hands it back at once.)
func TestSecondSignalExitsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("process HA test")
	}
	stack, client, pool := haStack(t, 1)
	slow, err := stack.StartConductor("slow-stop", "METALLOC_CONDUCTOR_SHUTDOWN_GRACE=60s")
	require.NoError(t, err)
	dbtest.Nodes(t, pool, 48, "blocked")
	release := lockNodes(t, pool, "blocked")
	ctx := context.Background()
	dbtest.WaitFor(t, 10*time.Second, "slow-stop registered", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM conductors WHERE hostname = 'slow-stop' AND online`) == 1
	})
	slowID := conductorID(t, pool, "slow-stop")
	// Post until slow-stop owns one of the rows: each is claimed by one of
	// the two conductors.
	var mine string
	for i := 0; mine == ""; i++ {
		require.Less(t, i, 40, "slow-stop never claimed a row")
		a, err := allocations.Create(ctx, client, allocations.CreateOpts{ResourceClass: "blocked"}).Extract()
		require.NoError(t, err)
		var owner int64
		dbtest.WaitFor(t, 10*time.Second, "allocation claimed", func() bool {
			return pool.QueryRow(ctx, `SELECT conductor_affinity FROM allocations WHERE uuid = $1 AND conductor_affinity IS NOT NULL`,
				a.UUID).Scan(&owner) == nil
		})
		if owner == slowID {
			mine = a.UUID
		}
	}
	waitReserving(t, slow, mine) // it waits for a locked node (parked)
	// Hold the row itself, then free the nodes: slow-stop's next attempt
	// locks a node and waits for the row, in its reservation statement.
	// (More nodes than rows posted: a node is free for that attempt.)
	rowTx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer rowTx.Rollback(ctx) //nolint:errcheck
	_, err = rowTx.Exec(ctx, `SELECT 1 FROM allocations WHERE uuid = $1 FOR UPDATE`, mine)
	require.NoError(t, err)
	release()
	dbtest.WaitFor(t, 30*time.Second, "slow-stop's reservation waiting for the row", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'metalloc-conductor slow-stop'
			AND state = 'active' AND wait_event_type = 'Lock'`) == 1
	})
	require.NoError(t, slow.Signal(syscall.SIGTERM))
	dbtest.WaitFor(t, 10*time.Second, "the first SIGTERM handled", func() bool {
		return logLines(t, []*devstack.Process{slow}, "stopping: finishing in-flight allocations") > 0
	})
	require.False(t, slow.Exited(), "the first SIGTERM waits for in-flight work (grace 60s)")
	sentAt := time.Now()
	require.NoError(t, slow.Signal(syscall.SIGTERM))
	err = slow.Wait(30 * time.Second) // well below the 60 s grace
	t.Logf("second SIGTERM: exited after %s: %v", time.Since(sentAt).Round(time.Millisecond), err)
	require.Error(t, err)
	require.Equal(t, 128+15, slow.Cmd.ProcessState.ExitCode())

	// Its reservation statement, already sent, may still commit once the
	// row is free (PostgreSQL runs it to its end; the client is gone): the
	// row is then active, reserved whole. Otherwise it is taken over.
	require.NoError(t, rowTx.Rollback(ctx))
	dbtest.WaitFor(t, haHeartbeatTimeout+haTakeoverPeriod+10*time.Second, "its row finished", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
	})
	require.Equal(t, 1, queryInt(t, pool, `SELECT count(*) FROM allocations WHERE uuid = $1 AND state = 'active' AND node_id IS NOT NULL`, mine))
	checkInvariants(t, pool)
}
