package conductor

import (
	"context"
	"fmt"
	"github.com/metalloc/metalloc/conductor/backend"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
)

// deadConductor inserts a conductor row whose heartbeat is an hour old and n
// allocating rows it owns, and returns its id.
func deadConductor(t *testing.T, pool *pgxpool.Pool, hostname string, n int, rc string) int64 {
	t.Helper()
	id := dbtest.Conductor(t, pool, hostname, time.Hour, true)
	for range n {
		dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: rc, Conductor: id})
	}
	return id
}

var fastHA = Config{
	PollInterval: time.Hour, HeartbeatInterval: 200 * time.Millisecond, HeartbeatTimeout: time.Second,
	TakeoverSchedule: "@every 1s",
}

// Three live conductors race to take over a dead one's rows: every row is
// taken exactly once (the takeover counters add up to the row count) and
// reserved.
func TestTakeoverOfDeadConductorRacesSafely(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 40, "gold")
	dead := deadConductor(t, pool, "dead", 30, "gold")
	var metrics []*Metrics
	for i := range 3 {
		cfg := fastHA
		cfg.Hostname = fmt.Sprintf("live%d", i)
		m := NewMetrics(prometheus.NewRegistry())
		metrics = append(metrics, m)
		svc, err := NewService(cfg, pool, zaptest.NewLogger(t))
		require.NoError(t, err)
		svc.Metrics = m
		runService(t, svc)
	}
	dbtest.WaitFor(t, 20*time.Second, "the dead conductor's 30 rows to be taken over and active", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`) == 30
	})
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE conductor_affinity = $1`, dead))
	var taken float64
	for _, m := range metrics {
		taken += testutil.ToFloat64(m.takeovers)
	}
	require.Equal(t, 30.0, taken)
	require.Equal(t, 30, dbtest.Count(t, pool, `SELECT count(DISTINCT node_id) FROM allocations WHERE state = 'active'`))
}

// With takeover off, a dead conductor's rows wait for it.
func TestTakeoverOff(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 5, "gold")
	dead := deadConductor(t, pool, "dead", 3, "gold")
	cfg := fastHA
	cfg.Hostname, cfg.TakeoverSchedule = "live", "off"
	svc, err := NewService(cfg, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	svc.signals = newTestSignals(64)
	runService(t, svc)
	// Twelve heartbeats (2.4 s) span two periods of fastHA's "@every 1s"
	// plus its post-outage grace: a takeover would have run by then.
	for range 12 {
		<-svc.signals.heartbeat
	}
	require.Empty(t, svc.signals.takeover, "a takeover ran although takeover is off")
	require.Equal(t, 3, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE conductor_affinity = $1 AND state = 'allocating'`, dead))
}

func TestInvalidTakeoverSchedule(t *testing.T) {
	_, err := NewService(Config{Hostname: "x", TakeoverSchedule: "every minute"}, nil, zaptest.NewLogger(t))
	require.ErrorContains(t, err, "conductor.takeover_schedule")
}

// A conductor that was only slow cannot overwrite the new owner's work: its
// late reservation attempt and its late failure are both rejected by the
// conductor_affinity guard.
func TestLateWritesOfASlowConductorAreRejected(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 2, "gold")
	log := zaptest.NewLogger(t)
	alloc := backend.NewDatabase(pool, log)
	slow := deadConductor(t, pool, "slow", 0, "gold")
	live := dbtest.Conductor(t, pool, "live", 0, true)
	addAllocations(t, pool, 2, "gold")
	rows := NewRows(pool)
	claimed := claimRows(t, pool, slow, 2)
	require.Len(t, claimed, 2)

	owners, err := rows.DeadOwners(context.Background(), live)
	require.NoError(t, err)
	require.Len(t, owners, 1)
	won, lost, err := rows.TakeOver(context.Background(), live, owners[0], 10)
	require.NoError(t, err)
	require.Len(t, won, 2)
	require.Zero(t, lost)
	// A second takeover of the same rows finds nothing left to win.
	won2, _, err := rows.TakeOver(context.Background(), live, owners[0], 10)
	require.NoError(t, err)
	require.Empty(t, won2)

	// The slow conductor wakes up and goes on with its rows: both writes
	// are rejected.
	out, err := alloc.Process(context.Background(), slow, &claimed[0])
	require.NoError(t, err)
	require.Equal(t, backend.Lost, out)
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE allocation_id IS NOT NULL`))
	_, err = pool.Exec(context.Background(), `UPDATE nodes SET maintenance = true`)
	require.NoError(t, err)
	out, err = alloc.Process(context.Background(), slow, &claimed[1]) // no node fits: tries to fail the row
	require.NoError(t, err)
	require.Equal(t, backend.Lost, out)
	require.Equal(t, 2, dbtest.Count(t, pool,
		`SELECT count(*) FROM allocations WHERE state = 'allocating' AND conductor_affinity = $1`, live))
}

// A clean stop hands rows it could not finish back to the pool of unowned
// rows, and goes offline, so a peer picks them up at once.
func TestStopReleasesUnfinishedRows(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 3, "gold")
	// Hold every node locked: the conductor claims the rows but keeps
	// retrying the reservation.
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(context.Background(), `SELECT id FROM nodes FOR UPDATE`)
	require.NoError(t, err)

	// LockedNodeWait is long so that, however slow the machine, the rows are
	// still being retried (not failed) when the stop comes.
	cfg := Config{Hostname: "stopping", PollInterval: time.Hour, ShutdownGrace: 50 * time.Millisecond, LockedNodeWait: time.Minute}
	svc, err := NewService(cfg, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	svc.signals = newTestSignals(64)
	stop := runService(t, svc)
	addAllocations(t, pool, 3, "gold")
	// Every row claimed (the claimed signals add up to 3) and the first in
	// its reservation (a worker processes the rows its claim could not
	// reserve one after the other) when the stop comes.
	for claimed := 0; claimed < 3; {
		select {
		case n := <-svc.signals.claimed:
			claimed += n
		case <-time.After(10 * time.Second):
			t.Fatalf("after 10s: %d of 3 allocations claimed", claimed)
		}
	}
	select {
	case <-svc.signals.reserving:
	case <-time.After(10 * time.Second):
		t.Fatal("after 10s: no allocation in its reservation")
	}
	require.NoError(t, stop())
	require.EqualValues(t, 3, <-svc.signals.released, "the stop released the 3 rows")
	require.Equal(t, 3, dbtest.Count(t, pool,
		`SELECT count(*) FROM allocations WHERE state = 'allocating' AND conductor_affinity IS NULL`))
	require.Equal(t, 0, dbtest.Count(t, pool, `SELECT count(*) FROM conductors WHERE online`))

	require.NoError(t, tx.Rollback(context.Background()))
	start(t, pool, Config{Hostname: "peer", PollInterval: time.Hour})
	dbtest.WaitFor(t, 10*time.Second, "the released allocations to be active through the peer", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`) == 3
	})
}

// A claim running in the database when the stop comes ends before the stop
// hands the conductor's rows back: the row it claims is released with the
// rest, not left owned by a conductor gone offline. (The stop cancelled the
// claim's context; pgx gave the statement up, but PostgreSQL ran it to its
// end, after Release.) The test holds the claim in the database: every node
// row locked (no node for the row), and allocation_traits locked in a
// savepoint (the claim reads the row's traits there) until the stop has
// begun.
func TestStopLetsItsClaimEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 2, "gold")
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SELECT id FROM nodes FOR UPDATE`)
	require.NoError(t, err)

	cfg := Config{Hostname: "claiming", Workers: 1, PollInterval: time.Hour, ShutdownGrace: time.Minute,
		LockedNodeWait: time.Hour}
	svc, err := NewService(cfg, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	svc.signals = newTestSignals(64)
	stop := runService(t, svc)
	claims := holdClaim(t, tx, pool)

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case <-svc.signals.stopping:
	case <-time.After(30 * time.Second):
		t.Fatal("after 30s: the stop has not begun")
	}
	_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT held`) // the claim goes on; the nodes stay locked
	require.NoError(t, err)
	require.NoError(t, <-stopped)
	dbtest.WaitFor(t, 30*time.Second, "no claim running in the database", func() bool {
		return dbtest.Count(t, pool, claims) == 0
	})
	require.Zero(t, dbtest.Count(t, pool,
		`SELECT count(*) FROM allocations WHERE state = 'allocating' AND conductor_affinity IS NOT NULL`),
		"a row claimed after the stop's release is owned by a conductor gone offline")
	require.EqualValues(t, 1, <-svc.signals.released, "the stop released the row its claim took")
}

// holdClaim inserts an allocating row of class gold and holds the claim
// that comes for it in the database: under a savepoint "held" of tx, it
// locks allocation_traits, which the claim reads, and waits until a
// claim statement waits for that lock. ROLLBACK TO SAVEPOINT held lets
// the claim go on (tx's other locks stay). It returns the query counting
// the claim statements running, for the caller to wait for their end.
func holdClaim(t *testing.T, tx pgx.Tx, pool *pgxpool.Pool) (claims string) {
	t.Helper()
	ctx := context.Background()
	_, err := tx.Exec(ctx, `SAVEPOINT held`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE allocation_traits IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	// Not dbtest.Allocation: it writes allocation_traits, which is locked.
	_, err = pool.Exec(ctx, `INSERT INTO allocations (uuid, resource_class, state) VALUES (gen_random_uuid(), 'gold', 'allocating')`)
	require.NoError(t, err)
	claims = `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE '%metalloc_claim_reserve(%' AND state = 'active'
		  AND pid <> pg_backend_pid()`
	dbtest.WaitFor(t, 30*time.Second, "the claim waiting for allocation_traits", func() bool {
		return dbtest.Count(t, pool, claims+` AND wait_event_type = 'Lock'`) == 1
	})
	return claims
}
