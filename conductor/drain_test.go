package conductor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
)

// Three conductors serve a burst of 600 allocations; the middle one is
// drained part-way through (RequestDrain: the column and the
// notification). It had rows waiting for nodes the test holds locked:
// those it releases unowned after its grace, and its peers take them. Every
// allocation ends active, no node is held twice, and the drained conductor
// claims nothing after its drain while it stays alive, until it is
// stopped; a restart under its hostname ends the drain.
func TestDrainMidBurst(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	const burst, blocked = 600, 9
	dbtest.Nodes(t, pool, burst, "gold")
	dbtest.Nodes(t, pool, blocked, "blocked")
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SELECT id FROM nodes WHERE resource_class = 'blocked' FOR UPDATE`)
	require.NoError(t, err)

	cfg := Config{PollInterval: time.Hour, Workers: 4, ClaimBatch: 4, ShutdownGrace: 200 * time.Millisecond,
		LockedNodeWait: 2 * time.Minute, TakeoverSchedule: "@every 1s"}
	var drained *Service
	var stopDrained func() error
	for i := range 3 {
		c := cfg
		c.Hostname = fmt.Sprintf("c%d", i)
		svc, err := NewService(c, pool, zaptest.NewLogger(t))
		require.NoError(t, err)
		if i == 1 {
			svc.signals = newTestSignals(4096)
			drained = svc
			stopDrained = runService(t, svc)
		} else {
			runService(t, svc)
		}
	}
	// Rows waiting for locked nodes: each conductor owns some (a claim
	// batch of 4 per notification spreads them) when the drain comes.
	addAllocations(t, pool, blocked, "blocked")
	dbtest.WaitFor(t, 20*time.Second, "the blocked allocations claimed", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE resource_class = 'blocked' AND conductor_affinity IS NOT NULL`) == blocked
	})

	var wg sync.WaitGroup
	posted := make(chan struct{}, burst)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range burst / 4 {
				dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: "gold"})
				posted <- struct{}{}
			}
		}()
	}
	for range burst / 3 {
		<-posted
	}
	req, err := RequestDrain(ctx, pool, "c1")
	require.NoError(t, err)
	require.Equal(t, drained.ID(), req.ID)
	var released int64
	select {
	case released = <-drained.signals.drained:
	case <-time.After(20 * time.Second):
		t.Fatal("after 20s: c1 has not drained")
	}
	// What it owned once drained stays as it is: finished rows keep their
	// owner, and it claims no other.
	ownedAtDrain := dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE conductor_affinity = $1`, req.ID)
	st, err := ReadDrain(ctx, pool, req)
	require.NoError(t, err)
	require.Equal(t, DrainStatus{Alive: true, Requested: true, Drained: true, Released: released, Held: 0}, st)
	t.Logf("c1 drained mid-burst: %d rows released to its peers, %d finished by it", released, ownedAtDrain)

	wg.Wait()
	require.NoError(t, tx.Rollback(ctx))
	dbtest.WaitFor(t, 60*time.Second, "every allocation finished", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
	})
	require.Equal(t, burst+blocked, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`))
	require.Equal(t, burst+blocked, dbtest.Count(t, pool, `SELECT count(DISTINCT node_id) FROM allocations WHERE state = 'active'`),
		"no node held twice")
	require.Equal(t, ownedAtDrain, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE conductor_affinity = $1`, req.ID),
		"the drained conductor claimed nothing after its drain")
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM conductors WHERE id = $1 AND metalloc_conductor_alive(online, expires_at)`, req.ID),
		"drained, it stays alive")

	// A second request is harmless; stopping it is a clean stop with
	// nothing to release; a restart under its hostname ends the drain.
	_, err = RequestDrain(ctx, pool, "c1")
	require.NoError(t, err)
	require.NoError(t, stopDrained())
	require.EqualValues(t, 0, <-drained.signals.released)
	_, err = RequestDrain(ctx, pool, "c1")
	require.ErrorIs(t, err, ErrConductorOffline)
	c := cfg
	c.Hostname = "c1"
	start(t, pool, c)
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM conductors WHERE hostname = 'c1'
		AND drain_requested_at IS NULL AND drained_at IS NULL AND drain_released IS NULL`))
}

// A claim still running in the database when a drain's grace is over runs
// to its end before the drain hands the conductor's rows back: the row it
// claims is released with the rest. Given up at the end of the grace (its
// context ended), the claim was cancelled by pgx's cancel request (the
// drain released nothing) or, when the request came after the statement's
// end on a loaded machine, committed after Release: rows owned by a
// drained conductor, which claims nothing and is never taken over
// (TestDrainMidBurst once found 8 such rows, two claims of 4). The test
// holds the claim in the database as TestStopLetsItsClaimEnd does, until
// the grace is over (its log line).
func TestDrainLetsItsClaimEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 2, "gold")
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SELECT id FROM nodes FOR UPDATE`)
	require.NoError(t, err)

	graceOver := make(chan struct{}, 1)
	log := zaptest.NewLogger(t, zaptest.WrapOptions(zap.Hooks(func(e zapcore.Entry) error {
		if e.Message == "shutdown grace period over; releasing the rest" {
			select {
			case graceOver <- struct{}{}:
			default:
			}
		}
		return nil
	})))
	cfg := Config{Hostname: "draining", Workers: 1, PollInterval: time.Hour, ShutdownGrace: 50 * time.Millisecond,
		LockedNodeWait: time.Hour}
	svc, err := NewService(cfg, pool, log)
	require.NoError(t, err)
	svc.signals = newTestSignals(64)
	runService(t, svc)
	claims := holdClaim(t, tx, pool)

	_, err = RequestDrain(ctx, pool, "draining")
	require.NoError(t, err)
	select {
	case <-graceOver:
	case <-time.After(30 * time.Second):
		t.Fatal("after 30s: the drain's grace is not over")
	}
	_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT held`) // the claim goes on; the nodes stay locked
	require.NoError(t, err)
	var released int64
	select {
	case released = <-svc.signals.drained:
	case <-time.After(30 * time.Second):
		t.Fatal("after 30s: not drained")
	}
	dbtest.WaitFor(t, 30*time.Second, "no claim running in the database", func() bool {
		return dbtest.Count(t, pool, claims) == 0
	})
	require.Zero(t, dbtest.Count(t, pool,
		`SELECT count(*) FROM allocations WHERE state = 'allocating' AND conductor_affinity IS NOT NULL`),
		"a row claimed after the drain's release is owned by a conductor that claims nothing")
	require.EqualValues(t, 1, released, "the drain released the row its claim took")
}

// A drain whose notification was missed (the column set without it) is
// seen at the conductor's next heartbeat.
func TestDrainSeenAtHeartbeat(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	svc, err := NewService(Config{Hostname: "quiet", PollInterval: time.Hour, HeartbeatInterval: 100 * time.Millisecond},
		pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	svc.signals = newTestSignals(64)
	runService(t, svc)
	_, err = pool.Exec(context.Background(), `UPDATE conductors SET drain_requested_at = now() WHERE hostname = 'quiet'`)
	require.NoError(t, err)
	select {
	case n := <-svc.signals.drained:
		require.EqualValues(t, 0, n)
	case <-time.After(10 * time.Second):
		t.Fatal("after 10s: not drained")
	}
}

// RequestDrain refuses a hostname no conductor has, one that stopped
// cleanly and one that is dead (online, its expiry passed), each with its
// own error.
func TestRequestDrainRefusals(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	dbtest.Conductor(t, pool, "stopped", 0, false)
	dbtest.Conductor(t, pool, "dead", 2*time.Minute, true)
	for host, want := range map[string]error{"nobody": ErrConductorUnknown, "stopped": ErrConductorOffline, "dead": ErrConductorDead} {
		_, err := RequestDrain(context.Background(), pool, host)
		require.True(t, errors.Is(err, want), "%s: %v", host, err)
		require.Contains(t, err.Error(), host)
	}
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM conductors WHERE drain_requested_at IS NOT NULL`))
}
