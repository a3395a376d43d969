package conductor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
)

func addNodes(t *testing.T, pool *pgxpool.Pool, n int, rc string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state)
		SELECT gen_random_uuid(), $2 || '-' || i, 'fake-hardware', $2, 'available', 'power off'
		  FROM generate_series(1, $1) i`, n, rc)
	require.NoError(t, err)
}

func addAllocations(t *testing.T, pool *pgxpool.Pool, n int, rc string) {
	t.Helper()
	for range n {
		_, err := pool.Exec(context.Background(),
			`INSERT INTO allocations (uuid, resource_class) VALUES ($1, $2)`, uuid.New(), rc)
		require.NoError(t, err)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool, onFail ...func()) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			for _, f := range onFail {
				f()
			}
			t.Fatal("condition not met in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func start(t *testing.T, pool *pgxpool.Pool, cfg Config) (stop func() error) {
	t.Helper()
	svc, err := NewService(cfg, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	return runService(t, svc)
}

// runService runs svc until the test ends (or stop is called) and returns
// once it is ready.
func runService(t *testing.T, svc *Service) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	svc.OnReady = func() { close(ready) }
	errc := make(chan error, 1)
	go func() { errc <- svc.Run(ctx) }()
	select {
	case <-ready:
	case err := <-errc:
		cancel()
		require.NoError(t, err)
	}
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() { cancel(); runErr = <-errc })
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestTwoConductorsProcessEverythingOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	addNodes(t, pool, 50, "gold")
	// Poll slowly: the wake-up must come from NOTIFY.
	cfg := Config{PollInterval: time.Hour, Workers: 4, ClaimBatch: 2}
	for i := range 2 {
		c := cfg
		c.Hostname = fmt.Sprintf("c%d", i)
		start(t, pool, c)
	}
	addAllocations(t, pool, 60, "gold")
	waitFor(t, 30*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
	}, func() {
		rows, _ := pool.Query(context.Background(), `SELECT id, uuid::text, state, coalesce(conductor_affinity, 0), coalesce(node_id, 0) FROM allocations ORDER BY id`)
		for rows.Next() {
			var id, ca, nid int64
			var u, st string
			_ = rows.Scan(&id, &u, &st, &ca, &nid)
			t.Logf("row %d %s %s conductor=%d node=%d", id, u, st, ca, nid)
		}
		t.Logf("nodes held: %d", count(t, pool, `SELECT count(*) FROM nodes WHERE allocation_id IS NOT NULL`))
	})
	require.Equal(t, 50, count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`))
	require.Equal(t, 10, count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'error'`))
	require.Equal(t, 50, count(t, pool, `SELECT count(DISTINCT node_id) FROM allocations WHERE state = 'active'`))
	require.Equal(t, 2, count(t, pool, `SELECT count(DISTINCT conductor_affinity) FROM allocations`))
}

func TestDuplicateHostnameRefusedWhileAlive(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	stop := start(t, pool, Config{Hostname: "same"})
	svc, err := NewService(Config{Hostname: "same"}, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	err = svc.Run(context.Background())
	require.True(t, errors.Is(err, ErrHostnameTaken), err)
	// After a clean stop the row is offline and the name can be reused.
	require.NoError(t, stop())
	require.Equal(t, 0, count(t, pool, `SELECT count(*) FROM conductors WHERE hostname = 'same' AND online`))
	start(t, pool, Config{Hostname: "same"})
}

func TestResumesOwnUnfinishedRowsAtStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	addNodes(t, pool, 5, "gold")
	var id int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`INSERT INTO conductors (hostname, online, heartbeat_at) VALUES ('crashed', true, now() - interval '1 hour') RETURNING id`).Scan(&id))
	// Rows this conductor claimed before it crashed, and one unclaimed row.
	for range 3 {
		_, err := pool.Exec(context.Background(),
			`INSERT INTO allocations (uuid, resource_class, conductor_affinity) VALUES ($1, 'gold', $2)`, uuid.New(), id)
		require.NoError(t, err)
	}
	start(t, pool, Config{Hostname: "crashed", PollInterval: time.Hour})
	waitFor(t, 10*time.Second, func() bool {
		return count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active' AND conductor_affinity = $1`, id) == 3
	})
}
