package conductor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/lease"
)

// leaseCfg is fastHA with lease.ending 2 s before the end.
func leaseCfg() Config {
	cfg := fastHA
	cfg.LeaseEndingNotice = 2 * time.Second
	return cfg
}

// leaseService is a conductor named hostname with leaseCfg.
func leaseService(t *testing.T, pool *pgxpool.Pool, hostname string) *Service {
	cfg := leaseCfg()
	cfg.Hostname = hostname
	svc, err := NewService(cfg, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	return svc
}

// waitLeaseActiveBy waits until the one lease is active and svc's.
func waitLeaseActiveBy(t *testing.T, pool *pgxpool.Pool, svc *Service) {
	dbtest.WaitFor(t, 10*time.Second, "the lease active, started by "+svc.cfg.Hostname, func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE state = 'active' AND conductor_affinity = $1`, svc.ID()) == 1
	})
}

// reservablePool is a fresh database with n reservable gold nodes.
func reservablePool(t *testing.T, n int) *pgxpool.Pool {
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, n, "gold")
	_, err := pool.Exec(context.Background(), `UPDATE nodes SET reservable = true`)
	require.NoError(t, err)
	return pool
}

// dbNow is the database clock, truncated to the second.
func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	var now time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT date_trunc('second', now())`).Scan(&now))
	return now
}

// admitLease admits a lease of count gold nodes for project over
// [start, end) through package lease (reservable nodes only).
func admitLease(t *testing.T, pool *pgxpool.Pool, project, onStart string, count int, start, end time.Time) uuid.UUID {
	t.Helper()
	v, err := lease.NewStore(pool).Admit(context.Background(), lease.Request{
		UUID: uuid.New(), ProjectID: project, Start: start, End: end, OnStart: onStart,
		Reservations: []lease.Reservation{{ResourceClass: "gold", Count: count, Rule: lease.RuleNone, LevelIndex: -1}},
	}, zaptest.NewLogger(t))
	require.NoError(t, err)
	return v.Uuid
}

// leaseEventLag is how long after the lease's start_time (kind
// lease.start) or end_time (lease.end) its event's transaction began, by
// the database clock, and how many such events there are.
func leaseEventLag(t *testing.T, pool *pgxpool.Pool, u uuid.UUID, kind string) (time.Duration, int) {
	t.Helper()
	col := "start_time"
	if kind == EventLeaseEnd {
		col = "end_time"
	}
	var lag float64
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT coalesce(max(extract(epoch FROM e.at - l.`+col+`)), 0)::float8, count(e.*)::int
		  FROM leases l LEFT JOIN allocation_events e ON e.allocation_uuid = l.uuid AND e.kind = $2
		 WHERE l.uuid = $1`, u, kind).Scan(&lag, &n))
	return time.Duration(lag * float64(time.Second)), n
}

// requireOnTime: lease u has one event of kind, sent within a second after
// its time (leaseEventLag).
func requireOnTime(t *testing.T, pool *pgxpool.Pool, u uuid.UUID, kind string) {
	t.Helper()
	lag, n := leaseEventLag(t, pool, u, kind)
	require.Equal(t, 1, n, "lease %s: %s events", u, kind)
	require.Less(t, lag, time.Second, "lease %s: %s late", u, kind)
	require.GreaterOrEqual(t, lag, time.Duration(0), "lease %s: %s early", u, kind)
}

// Three conductors race over six leases starting in the same second (four
// on_start allocate, two lessee) and ending three seconds later: each
// starts and ends once (one lease.start, lease.ending and lease.end each;
// one allocation per node), within a second of its times by the database
// clock, with its allocations made (owned by the project, active on the
// lease's nodes) or its nodes' lessee set, and at the end the allocations
// gone, the lessee cleared, the rows released.
func TestLeasesStartAndEndOnTimeOnce(t *testing.T) {
	t.Parallel()
	pool := reservablePool(t, 12)
	start := dbNow(t, pool).Add(3 * time.Second)
	end := start.Add(3 * time.Second)
	var leases []uuid.UUID
	for i := range 6 {
		onStart := "allocate"
		if i >= 4 {
			onStart = "lessee"
		}
		leases = append(leases, admitLease(t, pool, fmt.Sprintf("p%d", i), onStart, 2, start, end))
	}
	startConductors(t, pool, leaseCfg(), 3)

	dbtest.WaitFor(t, 10*time.Second, "every lease active", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE state = 'active'`) == 6
	})
	for i, u := range leases {
		requireOnTime(t, pool, u, EventLeaseStart)
		owner := fmt.Sprintf("p%d", i)
		if i < 4 {
			require.Equal(t, 2, dbtest.Count(t, pool, `
				SELECT count(*) FROM leases l JOIN lease_nodes ln ON ln.lease_id = l.id
				  JOIN nodes n ON n.id = ln.node_id JOIN allocations a ON a.id = n.allocation_id
				 WHERE l.uuid = $1 AND a.owner = $2 AND a.state = 'active' AND n.instance_uuid = a.uuid`, u, owner))
		} else {
			require.Equal(t, 2, dbtest.Count(t, pool, `
				SELECT count(*) FROM leases l JOIN lease_nodes ln ON ln.lease_id = l.id
				  JOIN nodes n ON n.id = ln.node_id WHERE l.uuid = $1 AND n.lessee = $2`, u, owner))
		}
	}
	require.Equal(t, 8, dbtest.Count(t, pool, `SELECT count(*) FROM allocations`))
	require.Equal(t, 8, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_events WHERE kind = 'created'`))

	dbtest.WaitFor(t, 10*time.Second, "every lease ended", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE state = 'ended'`) == 6
	})
	for _, u := range leases {
		requireOnTime(t, pool, u, EventLeaseEnd)
		require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_events WHERE kind = 'lease.ending' AND allocation_uuid = $1`, u))
	}
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations`))
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE lessee IS NOT NULL OR allocation_id IS NOT NULL OR instance_uuid IS NOT NULL`))
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM lease_nodes WHERE NOT released`))
}

// A conductor that died after claiming a lease (its conductor_affinity
// set, its process gone: expired heartbeat, as a conductor killed without
// releasing leaves it) is taken over: a live conductor starts the lease
// within a second of its start_time, and ends it on time.
func TestLeaseOfDeadConductorTakenOver(t *testing.T) {
	t.Parallel()
	pool := reservablePool(t, 2)
	ctx := context.Background()
	dead := dbtest.Conductor(t, pool, "dead", time.Hour, true)
	start := dbNow(t, pool).Add(2 * time.Second)
	u := admitLease(t, pool, "p1", "allocate", 2, start, start.Add(2*time.Second))
	_, err := pool.Exec(ctx, `UPDATE leases SET conductor_affinity = $1 WHERE uuid = $2`, dead, u)
	require.NoError(t, err)
	svc := leaseService(t, pool, "live")
	runService(t, svc)
	waitLeaseActiveBy(t, pool, svc)
	requireOnTime(t, pool, u, EventLeaseStart)
	require.Equal(t, 2, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE owner = 'p1' AND state = 'active'`))

	// Ended by the live one too, as the dead one's would be.
	dbtest.WaitFor(t, 10*time.Second, "the lease ended", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE state = 'ended'`) == 1
	})
	requireOnTime(t, pool, u, EventLeaseEnd)
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations`))
}

// A conductor stopped in the middle of a lease's start (its context
// cancelled inside the start transaction, after the compare-and-set: the
// move rolls back; leases are not released, so the lease stays its own)
// goes offline, and another conductor starts the lease: one lease.start,
// its allocations made once.
func TestLeaseStartInterruptedTakenOver(t *testing.T) {
	t.Parallel()
	pool := reservablePool(t, 2)
	start := dbNow(t, pool).Add(2 * time.Second)
	u := admitLease(t, pool, "p1", "allocate", 2, start, start.Add(time.Hour))
	a := leaseService(t, pool, "killed")
	inside := make(chan struct{})
	var once sync.Once
	a.leaseStarting = func(ctx context.Context) {
		once.Do(func() { close(inside) })
		<-ctx.Done()
	}
	stopA := runService(t, a)
	select {
	case <-inside:
	case <-time.After(10 * time.Second):
		t.Fatal("the first conductor never started the lease")
	}
	require.NoError(t, stopA())
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE state = 'pending' AND conductor_affinity = $1`, a.ID()))
	b := leaseService(t, pool, "survivor")
	runService(t, b)
	waitLeaseActiveBy(t, pool, b)
	_, n := leaseEventLag(t, pool, u, EventLeaseStart)
	require.Equal(t, 1, n)
	require.Equal(t, 2, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE owner = 'p1' AND state = 'active'`))
}

// A lease whose node is not free at the start (in maintenance) starts on
// the others, the node named in status_reason; a cancelled lease is never
// started.
func TestLeaseStartSkipsNodesNotFree(t *testing.T) {
	t.Parallel()
	pool := reservablePool(t, 4)
	ctx := context.Background()
	start := dbNow(t, pool).Add(2 * time.Second)
	u := admitLease(t, pool, "p1", "allocate", 2, start, start.Add(time.Hour))
	c := admitLease(t, pool, "p2", "allocate", 2, start, start.Add(time.Hour))
	_, err := pool.Exec(ctx, `UPDATE leases SET state = 'cancelled' WHERE uuid = $1`, c)
	require.NoError(t, err)
	var name string
	require.NoError(t, pool.QueryRow(ctx, `
		UPDATE nodes SET maintenance = true WHERE id = (
		  SELECT min(ln.node_id) FROM lease_nodes ln JOIN leases l ON l.id = ln.lease_id WHERE l.uuid = $1)
		RETURNING name`, u).Scan(&name))
	startConductors(t, pool, leaseCfg(), 1)
	dbtest.WaitFor(t, 10*time.Second, "the lease active", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE state = 'active'`) == 1
	})
	var reason string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status_reason FROM leases WHERE uuid = $1`, u).Scan(&reason))
	require.Equal(t, "1 of 2 nodes were not free at the start and got no allocation: "+name, reason)
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE owner = 'p1'`))
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE state = 'cancelled'`))
}
