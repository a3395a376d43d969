package conductor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/lease"
	"github.com/metalloc/metalloc/topology"
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

// A lease whose node is not free at the start (in maintenance, and no
// other node free to replace it: the cancelled lease's rows still block
// here) is flagged (lease.degraded, once) and starts on the others, the
// node named in status_reason; a cancelled lease is never started.
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
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE uuid = $1 AND degraded_reason LIKE '%'
		|| $2::text || ' in maintenance not replaced%'`, u, name))
	require.Equal(t, 1, leaseEvents(t, pool, u, EventLeaseDegraded))
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE owner = 'p1'`))
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE state = 'cancelled'`))
}

// rackedReservablePool is a fresh database with, per class of classes,
// racks x perRack reservable nodes (dbtest.RackedNodes) and the topology
// levels row and rack.
func rackedReservablePool(t *testing.T, racks, perRack int, classes ...string) *pgxpool.Pool {
	t.Helper()
	pool := dbtest.New(t)
	for _, rc := range classes {
		dbtest.RackedNodes(t, pool, racks, perRack, rc)
	}
	ctx := context.Background()
	_, err := pool.Exec(ctx, `UPDATE nodes SET reservable = true`)
	require.NoError(t, err)
	require.NoError(t, topology.Save(ctx, pool,
		[]topology.Level{{Name: "row", Source: "extra.row"}, {Name: "rack", Source: "extra.rack"}}))
	return pool
}

// admitRackLease admits through store a lease of count nodes of rc in one
// rack for project over [start, end).
func admitRackLease(t *testing.T, store *lease.Store, project, rc string, count int, start, end time.Time) (uuid.UUID, error) {
	v, err := store.Admit(context.Background(), lease.Request{
		UUID: uuid.New(), ProjectID: project, Start: start, End: end, OnStart: lease.OnStartAllocate,
		Reservations: []lease.Reservation{{ResourceClass: rc, Count: count, Rule: lease.RuleRequired, Level: "rack", LevelIndex: 1}},
	}, zaptest.NewLogger(t))
	return v.Uuid, err
}

// leaseNodeNames are the names of the nodes lease u books (blocking
// rows), in id order.
func leaseNodeNames(t *testing.T, pool *pgxpool.Pool, u uuid.UUID) []string {
	t.Helper()
	return dbtest.Strings(t, pool, `
		SELECT n.name FROM lease_nodes ln JOIN leases l ON l.id = ln.lease_id JOIN nodes n ON n.id = ln.node_id
		 WHERE l.uuid = $1 AND NOT ln.released ORDER BY n.id`, u)
}

// requireWholeInOneRack: lease u books count nodes, none in maintenance,
// all in one rack, and is not flagged.
func requireWholeInOneRack(t *testing.T, pool *pgxpool.Pool, u uuid.UUID, count int) {
	t.Helper()
	var n, racks, maint int
	var degraded *string
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT count(*)::int, count(DISTINCT n.extra->>'rack')::int, count(*) FILTER (WHERE n.maintenance)::int,
		       (SELECT degraded_reason FROM leases WHERE uuid = $1)
		  FROM lease_nodes ln JOIN leases l ON l.id = ln.lease_id JOIN nodes n ON n.id = ln.node_id
		 WHERE l.uuid = $1 AND NOT ln.released`, u).Scan(&n, &racks, &maint, &degraded))
	require.Equal(t, []int{count, 1, 0}, []int{n, racks, maint}, "lease %s: nodes, racks, in maintenance", u)
	require.Nil(t, degraded, "lease %s degraded_reason", u)
}

// leaseEvents counts lease u's events of kind.
func leaseEvents(t *testing.T, pool *pgxpool.Pool, u uuid.UUID, kind string) int {
	return dbtest.Count(t, pool, `SELECT count(*) FROM allocation_events WHERE allocation_uuid = $1 AND kind = $2`, u, kind)
}

// Issue 43's replacement of failed nodes, by a running conductor, on three
// leases of 2 nodes in one rack (classes gold, silver, bronze: 2 racks of
// 3 nodes each, so the leases share no node):
//   - gold, starting in 3 s, one node in maintenance: replaced by the free
//     node of its rack (one lease.node_replaced), the lease starts on time
//     on two working nodes with their allocations;
//   - silver, starting in 30 minutes (within leaseRepairAhead), one node
//     deleted under it (as the Ironic mirror deletes; the API refuses):
//     a node of the same rack booked in its place;
//   - iron, starting in 2 days (beyond leaseRepairAhead), one node in
//     maintenance: replaced at once all the same;
//   - bronze, starting in 45 minutes, one node and the rack's free node in
//     maintenance: not replaced, flagged once (lease.degraded), the failed
//     node kept; once the free node is back it replaces the failed one
//     (a flagged lease is retried within leaseRepairAhead) and the flag
//     goes.
func TestLeaseFailedNodesReplaced(t *testing.T) {
	t.Parallel()
	pool := rackedReservablePool(t, 2, 3, "gold", "silver", "bronze", "iron")
	ctx := context.Background()
	store := lease.NewStore(pool)
	now := dbNow(t, pool)
	gold, err := admitRackLease(t, store, "pg", "gold", 2, now.Add(3*time.Second), now.Add(5*time.Second))
	require.NoError(t, err)
	silver, err := admitRackLease(t, store, "ps", "silver", 2, now.Add(30*time.Minute), now.Add(time.Hour))
	require.NoError(t, err)
	bronze, err := admitRackLease(t, store, "pb", "bronze", 2, now.Add(45*time.Minute), now.Add(time.Hour))
	require.NoError(t, err)
	iron, err := admitRackLease(t, store, "pi", "iron", 2, now.Add(48*time.Hour), now.Add(49*time.Hour))
	require.NoError(t, err)

	goldFailed := leaseNodeNames(t, pool, gold)[0]
	setMaint := func(name string, on bool) {
		_, err := pool.Exec(ctx, `UPDATE nodes SET maintenance = $2 WHERE name = $1`, name, on)
		require.NoError(t, err)
	}
	setMaint(goldFailed, true)
	_, err = pool.Exec(ctx, `DELETE FROM nodes WHERE name = $1`, leaseNodeNames(t, pool, silver)[0])
	require.NoError(t, err)
	bronzeNodes := leaseNodeNames(t, pool, bronze)
	var bronzeSpare string
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT name FROM nodes WHERE resource_class = 'bronze' AND name <> ALL($1)
		   AND extra->>'rack' = (SELECT extra->>'rack' FROM nodes WHERE name = $2)`, bronzeNodes, bronzeNodes[0]).Scan(&bronzeSpare))
	setMaint(bronzeNodes[0], true)
	setMaint(bronzeSpare, true)
	ironFailed := leaseNodeNames(t, pool, iron)[0]
	setMaint(ironFailed, true)

	startConductors(t, pool, leaseCfg(), 1)

	dbtest.WaitFor(t, 10*time.Second, "the gold lease active", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE uuid = $1 AND state = 'active'`, gold) == 1
	})
	requireOnTime(t, pool, gold, EventLeaseStart)
	requireWholeInOneRack(t, pool, gold, 2)
	require.NotContains(t, leaseNodeNames(t, pool, gold), goldFailed)
	require.Equal(t, 1, leaseEvents(t, pool, gold, EventLeaseNodeReplaced))
	require.Equal(t, 2, dbtest.Count(t, pool, `
		SELECT count(*) FROM leases l JOIN lease_nodes ln ON ln.lease_id = l.id
		  JOIN nodes n ON n.id = ln.node_id JOIN allocations a ON a.id = n.allocation_id
		 WHERE l.uuid = $1 AND a.owner = 'pg' AND a.state = 'active'`, gold))
	var status *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status_reason FROM leases WHERE uuid = $1`, gold).Scan(&status))
	require.Nil(t, status, "every node free at the start")

	dbtest.WaitFor(t, 10*time.Second, "the silver lease whole again", func() bool {
		return len(leaseNodeNames(t, pool, silver)) == 2
	})
	requireWholeInOneRack(t, pool, silver, 2)
	require.Equal(t, 1, dbtest.Count(t, pool, `
		SELECT count(*) FROM allocation_events WHERE allocation_uuid = $1 AND kind = $2
		   AND last_error LIKE 'reservation 1: a deleted node replaced by silver-%'`, silver, EventLeaseNodeReplaced))

	dbtest.WaitFor(t, 10*time.Second, "the iron lease's failed node replaced", func() bool {
		return !slices.Contains(leaseNodeNames(t, pool, iron), ironFailed)
	})
	requireWholeInOneRack(t, pool, iron, 2)
	require.Equal(t, 1, leaseEvents(t, pool, iron, EventLeaseNodeReplaced))

	dbtest.WaitFor(t, 10*time.Second, "the bronze lease flagged", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE uuid = $1 AND degraded_reason IS NOT NULL`, bronze) == 1
	})
	require.Equal(t, bronzeNodes, leaseNodeNames(t, pool, bronze), "the failed node kept")
	require.Equal(t, 1, leaseEvents(t, pool, bronze, EventLeaseDegraded))
	require.Zero(t, leaseEvents(t, pool, bronze, EventLeaseNodeReplaced))
	v, err := store.Get(ctx, bronze.String())
	require.NoError(t, err)
	doc := v.Doc("http://x")
	require.Equal(t, true, doc["degraded"])
	require.Contains(t, *v.DegradedReason, "node "+bronzeNodes[0]+" in maintenance not replaced")

	setMaint(bronzeSpare, false)
	dbtest.WaitFor(t, 10*time.Second, "the bronze lease's failed node replaced", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE uuid = $1 AND degraded_reason IS NULL`, bronze) == 1
	})
	requireWholeInOneRack(t, pool, bronze, 2)
	require.ElementsMatch(t, []string{bronzeNodes[1], bronzeSpare}, leaseNodeNames(t, pool, bronze))
	require.Equal(t, 1, leaseEvents(t, pool, bronze, EventLeaseNodeReplaced))
	require.Equal(t, 1, leaseEvents(t, pool, bronze, EventLeaseDegraded))
}

// Issue 43's must-show race: 32 clients request overlapping leases on the
// same racks through 4 admission stores on separate pools (4 API servers)
// while 3 conductors run. No node is ever in two overlapping blocking rows
// (checked against the table), and every accepted lease starts and ends
// on time: its lease.start and lease.end events (the moves' transactions)
// within a second after its start_time and end_time by the database
// clock, once each; with its allocations made (a created event per booked
// node, owned by its project) and removed (as many deleted), none left.
func TestLeaseRaceStartsAndEndsOnTime(t *testing.T) {
	t.Parallel()
	pool := rackedReservablePool(t, 4, 8, "gold") // 32 nodes
	var stores []*lease.Store
	for range 4 {
		p, err := pgxpool.New(context.Background(), pool.Config().ConnString())
		require.NoError(t, err)
		t.Cleanup(p.Close)
		stores = append(stores, lease.NewStore(p))
	}
	startConductors(t, pool, leaseCfg(), 3)
	// Admitted an hour ahead (however long the admissions take on a busy
	// machine), then the whole calendar moved to start in 2 s (below).
	base := dbNow(t, pool).Add(time.Hour).Truncate(time.Second)
	type result struct {
		u     uuid.UUID
		count int
		err   error
	}
	results := make([]result, 32)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Windows of 3 s every second: each overlaps its neighbours.
			start := base.Add(time.Duration(i%4) * time.Second)
			count := 2 + i%3
			u, err := admitRackLease(t, stores[i%4], fmt.Sprintf("p%d", i), "gold", count, start, start.Add(3*time.Second))
			results[i] = result{u, count, err}
		}()
	}
	wg.Wait()
	var admitted []int
	for i, r := range results {
		var refused *lease.RefusedError
		switch {
		case r.err == nil:
			admitted = append(admitted, i)
		case errors.As(r.err, &refused), errors.Is(r.err, lease.ErrContended):
		default:
			t.Fatalf("client %d: %v", i, r.err)
		}
	}
	t.Logf("%d of 32 leases admitted", len(admitted))
	require.Greater(t, len(admitted), 8)
	require.Equal(t, len(admitted), dbtest.Count(t, pool, `SELECT count(*) FROM leases`))
	// Every window moved by the same whole number of seconds (an hour less
	// 2 s, far more than the 6 s they span, so that no moved row meets an
	// unmoved one): what the exclusion constraint admitted stays apart,
	// and the first lease starts 2 s from now by the database clock.
	_, err := pool.Exec(context.Background(), `
		WITH d AS (SELECT min(start_time) - (date_trunc('second', now()) + interval '2 s') AS d FROM leases),
		     l AS (UPDATE leases SET start_time = start_time - d.d, end_time = end_time - d.d FROM d RETURNING 1)
		UPDATE lease_nodes SET during = tstzrange(lower(during) - d.d, upper(during) - d.d) FROM d`)
	require.NoError(t, err)

	dbtest.WaitFor(t, 30*time.Second, "every lease ended", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE state = 'ended'`) == len(admitted)
	})
	require.Zero(t, dbtest.Count(t, pool, `
		SELECT count(*) FROM lease_nodes a JOIN lease_nodes b
		    ON a.node_id = b.node_id AND a.lease_id < b.lease_id AND a.during && b.during`),
		"two leases booked one node over overlapping windows")
	for _, i := range admitted {
		r := results[i]
		requireOnTime(t, pool, r.u, EventLeaseStart)
		requireOnTime(t, pool, r.u, EventLeaseEnd)
		owner := fmt.Sprintf("p%d", i)
		require.Equal(t, r.count, dbtest.Count(t, pool, `SELECT count(*) FROM lease_nodes ln JOIN leases l ON l.id = ln.lease_id WHERE l.uuid = $1`, r.u))
		require.Equal(t, r.count, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_events WHERE kind = 'created' AND owner = $1`, owner), "lease %d: allocations made", i)
		require.Equal(t, r.count, dbtest.Count(t, pool, `SELECT count(*) FROM allocation_events WHERE kind = 'deleted' AND owner = $1`, owner), "lease %d: allocations removed", i)
	}
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM allocations`))
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE allocation_id IS NOT NULL OR instance_uuid IS NOT NULL`))
}

// TestLeaseMetrics: a lease started, noticed and ended by one conductor,
// one of its nodes put in maintenance before the start and replaced,
// moves the conductor's lease metrics: one move of each kind (start,
// ending, end, replace), the start's and the end's lateness observed once
// each, not negative (by the database clock, at or after the lease's
// times).
func TestLeaseMetrics(t *testing.T) {
	t.Parallel()
	pool := reservablePool(t, 3)
	ctx := context.Background()
	start := dbNow(t, pool).Add(2 * time.Second)
	u := admitLease(t, pool, "p1", "allocate", 2, start, start.Add(4*time.Second))
	_, err := pool.Exec(ctx, `UPDATE nodes SET maintenance = true WHERE id = (
		SELECT min(ln.node_id) FROM lease_nodes ln JOIN leases l ON l.id = ln.lease_id WHERE l.uuid = $1)`, u)
	require.NoError(t, err)
	svc := leaseService(t, pool, "metrics")
	reg := prometheus.NewRegistry()
	svc.Metrics = NewMetrics(reg)
	runService(t, svc)

	moves := func(kind string) float64 { return testutil.ToFloat64(svc.Metrics.leaseMoves.WithLabelValues(kind)) }
	dbtest.WaitFor(t, 20*time.Second, "the lease's end counted", func() bool { return moves(MoveEnd) == 1 })
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM leases WHERE uuid = $1 AND state = 'ended'`, u))
	require.Equal(t, 1.0, moves(MoveStart))
	require.Equal(t, 1.0, moves(MoveEnding))
	require.Equal(t, 1.0, moves(MoveReplace))
	require.Zero(t, moves(MoveError))

	fams, err := reg.Gather()
	require.NoError(t, err)
	counts := map[string]uint64{}
	for _, f := range fams {
		if f.GetName() != "metalloc_conductor_lease_lateness_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "move" {
					counts[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
			require.GreaterOrEqual(t, m.GetHistogram().GetSampleSum(), 0.0)
		}
	}
	require.Equal(t, map[string]uint64{MoveStart: 1, MoveEnd: 1}, counts)
}

// TestLeaseRepairRoundsPage: flagged leases starting within the hour
// (their nodes failed, no spare) are found at every round; with more of them than a batch, the rounds page
// through them (a full page, then the rest, then from the start again)
// instead of checking the same first batch without a pause and never
// reaching the others.
func TestLeaseRepairRoundsPage(t *testing.T) {
	t.Parallel()
	pool := rackedReservablePool(t, 2, 4, "gold")
	ctx := context.Background()
	store := lease.NewStore(pool)
	now := dbNow(t, pool)
	n := leaseBatch + 2
	for i := range n {
		u, err := admitRackLease(t, store, fmt.Sprintf("p%d", i), "gold", 1, now.Add(time.Duration(30+i)*time.Minute), now.Add(2*time.Hour))
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE leases SET degraded_reason = 'no spare' WHERE uuid = $1`, u)
		require.NoError(t, err)
	}
	// Every node failed: no lease can be repaired, each stays flagged.
	_, err := pool.Exec(ctx, `UPDATE nodes SET maintenance = true`)
	require.NoError(t, err)
	svc := leaseService(t, pool, "pager")
	require.Equal(t, leaseBatch, svc.repairRound(ctx), "the first page is full")
	require.Equal(t, n-leaseBatch, svc.repairRound(ctx), "the second page holds the rest")
	require.Equal(t, leaseBatch, svc.repairRound(ctx), "then from the start again")
}
