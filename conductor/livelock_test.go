package conductor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
)

// slowExpiry is a configuration under which only the liveness lock can
// make a conductor dead within a test: a minute's expiry, takeover runs an
// hour apart.
var slowExpiry = Config{
	PollInterval: time.Hour, HeartbeatInterval: 200 * time.Millisecond, HeartbeatTimeout: time.Minute,
	TakeoverSchedule: "@every 1h",
}

// lockHolder is a conductor process as the database sees it: an online
// row whose expiry is ttl from now, n allocating rows it owns, and its
// liveness lock held on a session of its own (closing the session is its
// process dying).
type lockHolder struct {
	id   int64
	conn *pgx.Conn
}

func holdLock(t *testing.T, pool *pgxpool.Pool, hostname string, ttl time.Duration, n int, rc string) *lockHolder {
	t.Helper()
	ctx := context.Background()
	id := dbtest.Conductor(t, pool, hostname, 0, true)
	_, err := pool.Exec(ctx, `UPDATE conductors SET expires_at = now() + make_interval(secs => $2) WHERE id = $1`, id, ttl.Seconds())
	require.NoError(t, err)
	for range n {
		dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: rc, Conductor: id})
	}
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	ok, err := tryLock(ctx, conn, id, 0)
	require.NoError(t, err)
	require.True(t, ok)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return &lockHolder{id: id, conn: conn}
}

// startPeer starts a conductor named hostname with cfg and metrics.
func startPeer(t *testing.T, pool *pgxpool.Pool, cfg Config, hostname string) *Service {
	t.Helper()
	cfg.Hostname = hostname
	svc, err := NewService(cfg, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	svc.Metrics = NewMetrics(prometheus.NewRegistry())
	runService(t, svc)
	return svc
}

// requireKnownSchema checks that conductor id's row says what `db sync
// --contract` reads (db.Binaries): this process's pid and the highest
// migration this binary knows.
func requireKnownSchema(t *testing.T, pool *pgxpool.Pool, id int64) {
	t.Helper()
	latest, err := db.LatestVersion()
	require.NoError(t, err)
	var schema int64
	var pid int32
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT schema_version, pid FROM conductors WHERE id = $1`, id).Scan(&schema, &pid))
	require.Equal(t, latest, schema)
	require.Equal(t, int32(os.Getpid()), pid)
}

// crash ends the holder's session, as the death of its process does.
func (h *lockHolder) crash(t *testing.T) {
	require.NoError(t, h.conn.Close(context.Background()))
}

// A conductor whose process dies (its lock session ends) while its expiry
// is a minute away is judged dead by a peer within a second or two and its
// rows are taken over at once, although the takeover schedule is an hour.
// Before the liveness lock they waited for the expiry and the schedule.
func TestLivenessLockCrashTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 20, "gold")
	dead := holdLock(t, pool, "crashing", time.Minute, 10, "gold")
	svc := startPeer(t, pool, slowExpiry, "peer")
	requireKnownSchema(t, pool, svc.ID())
	time.Sleep(3 * livenessPoll) // the peer sees the lock held
	require.Equal(t, 10, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE conductor_affinity = $1`, dead.id))

	killed := time.Now()
	dead.crash(t)
	dbtest.WaitFor(t, 15*time.Second, "the crashed conductor's rows taken over and active", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active' AND conductor_affinity = $1`, svc.ID()) == 10
	})
	t.Logf("rows of the crashed conductor taken over and active %v after its session ended", time.Since(killed))
	require.Equal(t, 0, dbtest.Count(t, pool, `SELECT count(*) FROM conductors WHERE id = $1 AND metalloc_conductor_alive(online, expires_at)`, dead.id))
	require.Equal(t, 10.0, testutil.ToFloat64(svc.Metrics.takeovers))
}

// A process restarted under the same hostname is refused while the
// previous one holds its lock (alive), and registers at once, with the
// same id and the previous process's rows, once that lock is free, though
// the expiry is a minute away. Before, it was refused until the expiry.
func TestLivenessLockRestartUnderSameHostname(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 10, "gold")
	old := holdLock(t, pool, "same", time.Minute, 5, "gold")
	cfg := slowExpiry
	cfg.Hostname = "same"
	svc, err := NewService(cfg, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	err = svc.Run(context.Background())
	require.True(t, errors.Is(err, ErrHostnameTaken), err)

	old.crash(t)
	start := time.Now()
	svc = startPeer(t, pool, slowExpiry, "same")
	t.Logf("registered %v after the previous process's session ended", time.Since(start))
	require.Equal(t, old.id, svc.ID())
	requireKnownSchema(t, pool, svc.ID())
	dbtest.WaitFor(t, 15*time.Second, "the previous process's rows resumed and active", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active' AND conductor_affinity = $1`, old.id) == 5
	})
}

// A conductor that is silent while its session lives (SIGSTOP, a
// partition) keeps its lock: it is dead only once its expiry passes, as
// before. A process of its hostname registering after the expiry ends that
// session, so the silent process finds its lock gone if it wakes.
func TestLivenessLockSilentConductorNeedsItsExpiry(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 10, "gold")
	ttl := 6 * time.Second
	stopped := holdLock(t, pool, "stopped", ttl, 4, "gold")
	cfg := fastHA
	cfg.Hostname = "peer"
	svc, err := NewService(cfg, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	svc.signals = newTestSignals(64)
	runService(t, svc)
	// Takeover runs (every second) while the silent conductor is unexpired
	// take nothing.
	alive := func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM conductors WHERE id = $1 AND metalloc_conductor_alive(online, expires_at)`, stopped.id) == 1
	}
	for ran := 0; ran < 2 && alive(); {
		won := <-svc.signals.takeover
		require.False(t, won > 0 && alive(), "a silent conductor's rows taken over before its expiry")
		ran++
	}
	dbtest.WaitFor(t, 20*time.Second, "the silent conductor's rows taken over after its expiry", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active' AND conductor_affinity = $1`, svc.ID()) == 4
	})

	cfg.Hostname = "stopped"
	again, err := NewService(cfg, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	runService(t, again)
	require.Equal(t, stopped.id, again.ID())
	require.Error(t, stopped.conn.Ping(context.Background()), "the expired process's session still lives")
}

// When every session ends at once and the server takes no connection for
// a while (a PostgreSQL restart; here every backend of the test's
// database terminated while it refuses connections for 2 s), every lock
// is free for a moment and the conductors come back one by one: nobody is
// judged crashed, nobody goes offline, no row changes owner, and each
// conductor takes its lock back.
func TestLivenessLockNoTakeoverStormWhenAllSessionsEnd(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	var svcs []*Service
	for _, h := range []string{"c0", "c1", "c2"} {
		svcs = append(svcs, startPeer(t, pool, slowExpiry, h))
	}
	time.Sleep(3 * livenessPoll) // each has seen the others' locks
	var before time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&before))
	// From the maintenance database: a session cannot close its own.
	name := pool.Config().ConnConfig.Database
	admin := pool.Config().ConnConfig.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	require.NoError(t, err)
	allow := func(on bool) {
		_, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %t", pgx.Identifier{name}.Sanitize(), on))
		require.NoError(t, err)
	}
	t.Cleanup(func() { allow(true); _ = conn.Close(ctx) })
	for round := range 2 {
		allow(false)
		var ended int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int
			FROM pg_stat_activity WHERE datname = $1`, name).Scan(&ended))
		time.Sleep(2 * time.Second)
		allow(true)
		t.Logf("round %d: ended %d sessions, refused connections for 2 s", round, ended)
		dbtest.WaitFor(t, 15*time.Second, "every conductor holding its lock again", func() bool {
			var n int
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
				AND objsubid = 2 AND classid::int8 = $1 AND database = (SELECT oid FROM pg_database WHERE datname = $2)`,
				int64(livenessLockClass), name).Scan(&n)
			return err == nil && n == 3
		})
		time.Sleep(4 * livenessPoll) // past the two polls that judge a peer
	}
	require.Equal(t, 3, dbtest.Count(t, pool, `SELECT count(*) FROM conductors WHERE online`))
	// MarkCrashed writes updated_at (a heartbeat does not): nobody was
	// judged crashed, even for a moment.
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM conductors WHERE updated_at >= $1`, before),
		"a conductor was judged crashed")
	for _, s := range svcs {
		require.Zero(t, testutil.ToFloat64(s.Metrics.takeovers), "a conductor took rows over")
	}
}

// A conductor whose lock session ends while it lives takes the lock back
// and goes on; if another process has taken the lock meanwhile, it stops
// at once (ErrLivenessLockLost) without releasing that process's rows or
// marking it offline.
func TestLivenessLockLostStopsTheConductor(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	cfg := slowExpiry
	cfg.Hostname = "fenced"
	svc, err := NewService(cfg, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready, done := make(chan struct{}), make(chan error, 1)
	svc.OnReady = func() { close(ready) }
	go func() { done <- svc.Run(runCtx) }()
	<-ready
	holder := func() int {
		return dbtest.Count(t, pool, `SELECT coalesce(max(pid), 0)::int FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND objsubid = 2 AND classid::int8 = $1 AND objid::int8 = $2
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, int64(livenessLockClass), svc.ID())
	}
	first := holder()
	require.NotZero(t, first)
	_, err = pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, first)
	require.NoError(t, err)
	dbtest.WaitFor(t, 15*time.Second, "the conductor holding its lock again", func() bool {
		h := holder()
		return h != 0 && h != first
	})

	// Another process waits for the lock, and gets it the moment the
	// conductor's session ends.
	other, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer func() { _ = other.Close(ctx) }()
	locked := make(chan error, 1)
	go func() {
		_, err := other.Exec(ctx, `SELECT pg_advisory_lock($1::int4, $2::int4)`, livenessLockClass, int32(svc.ID()))
		locked <- err
	}()
	dbtest.WaitFor(t, 15*time.Second, "the other process waiting for the lock", func() bool {
		select {
		case err := <-locked:
			t.Fatalf("the other process's lock did not wait: %v", err)
		default:
		}
		return dbtest.Count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND wait_event = 'advisory'`) == 1
	})
	_, err = pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, holder())
	require.NoError(t, err)
	require.NoError(t, <-locked)
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrLivenessLockLost)
	case <-time.After(15 * time.Second):
		t.Fatal("the conductor that lost its lock did not stop")
	}
	require.Equal(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM conductors WHERE id = $1 AND online`, svc.ID()))
}
