package db_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/db/embedded"
)

// TestAcquireTimeout checks that a caller waiting for a connection of an
// exhausted pool gives up after AcquireTimeout with an error IsUnavailable
// reports, and that the acquire timeout can come from the URL.
func TestAcquireTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	u := dbtest.NewURL(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	for name, open := range map[string]func() (*pgxpool.Pool, error){
		"option": func() (*pgxpool.Pool, error) {
			return db.Open(ctx, u, db.PoolOptions{MaxConns: 1, AcquireTimeout: 200 * time.Millisecond})
		},
		"url": func() (*pgxpool.Pool, error) {
			return db.Open(ctx, u+sep+"pool_acquire_timeout=200ms", db.PoolOptions{MaxConns: 1})
		},
	} {
		pool, err := open()
		require.NoError(t, err, name)
		held, err := pool.Acquire(ctx)
		require.NoError(t, err, name)
		start := time.Now()
		_, err = pool.Exec(ctx, "SELECT 1")
		took := time.Since(start)
		require.Error(t, err, name)
		require.True(t, db.IsUnavailable(err), "%s: %v", name, err)
		// The acquire's own deadline ended the wait (ctx has none), and
		// not before it was due: no upper bound, which a loaded machine
		// could overrun.
		_, hasDeadline := ctx.Deadline()
		require.False(t, hasDeadline)
		require.ErrorIs(t, err, context.DeadlineExceeded, name)
		require.GreaterOrEqual(t, took, 200*time.Millisecond, name)
		held.Release()
		_, err = pool.Exec(ctx, "SELECT 1")
		require.NoError(t, err, name)
		pool.Close()
	}
	_, err := db.Open(ctx, u+sep+"pool_acquire_timeout=soon", db.PoolOptions{})
	require.ErrorContains(t, err, "pool_acquire_timeout")

	// Open's first connection is not bounded by AcquireTimeout (it flaked
	// with 200 ms on a loaded machine): with a bound no connection can
	// meet, Open still succeeds, and later acquires give up.
	pool, err := db.Open(ctx, u, db.PoolOptions{MaxConns: 1, AcquireTimeout: time.Nanosecond})
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, "SELECT 1")
	require.True(t, db.IsUnavailable(err), "%v", err)
}

// TestPoolAcrossRestart stops the server under an open pool: queries fail
// fast with errors IsUnavailable reports, and succeed again by themselves
// once the server is back. The pool collector reports the pool.
func TestPoolAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	t.Parallel()
	ctx := t.Context()
	dir, err := os.MkdirTemp(os.TempDir(), "metalloc-pg-restart-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	c, err := embedded.Start(ctx, embedded.Options{DataDir: dir, Log: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	pool, err := db.Open(ctx, c.URL("postgres"), db.PoolOptions{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	reg := prometheus.NewRegistry()
	reg.MustRegister(db.NewPoolCollector(pool, prometheus.Labels{"pool": "test"}))
	for range 10 {
		_, err := pool.Exec(ctx, "SELECT 1")
		require.NoError(t, err)
	}

	require.NoError(t, c.Stop(ctx))
	for i := range 20 {
		start := time.Now()
		_, err := pool.Exec(ctx, "SELECT 1")
		took := time.Since(start)
		require.Error(t, err, "query %d with the server down", i)
		require.True(t, db.IsUnavailable(err), "query %d: %v", i, err)
		// Refused at once, not given up on after a timeout (ctx has no
		// deadline; the pool's acquire and connect bounds are 5 s).
		require.NotErrorIs(t, err, context.DeadlineExceeded, "query %d with the server down took %v: %v", i, took, err)
	}

	require.NoError(t, c.StartAgain(ctx))
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := pool.Exec(ctx, "SELECT 1")
		if err == nil {
			break
		}
		require.True(t, db.IsUnavailable(err), "%v", err)
		require.True(t, time.Now().Before(deadline), "pool did not recover: %v", err)
		time.Sleep(20 * time.Millisecond)
	}

	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Equal(t, 13, n)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	values := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		require.Equal(t, "test", m.GetLabel()[0].GetValue())
		values[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	require.Equal(t, 4.0, values["metalloc_db_pool_max_connections"])
	require.GreaterOrEqual(t, values["metalloc_db_pool_acquires_total"], 11.0)
	require.GreaterOrEqual(t, values["metalloc_db_pool_new_connections_total"], 2.0, "a new connection after the restart")
	require.Positive(t, values["metalloc_db_pool_acquire_wait_seconds_total"])
}
