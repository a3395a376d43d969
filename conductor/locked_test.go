package conductor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
)

// lockClass locks every node of class rc in a transaction held until the
// returned release (or the end of the test).
func lockClass(t testing.TB, pool *pgxpool.Pool, rc string) (release func()) {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), `SELECT id FROM nodes WHERE resource_class = $1 FOR UPDATE`, rc)
	require.NoError(t, err)
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(context.Background())
		}
	}
	t.Cleanup(release)
	return release
}

// burst inserts n allocations of class rc in one statement (one
// transaction: they notify together, as a burst of POSTs does).
func burst(t testing.TB, pool *pgxpool.Pool, n int, rc string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO allocations (uuid, resource_class)
		SELECT gen_random_uuid(), $1 FROM generate_series(1, $2)`, rc, n)
	require.NoError(t, err)
}

// Rows that find every fitting node locked wait together, not one after
// the other: with every node of the class locked by a held transaction,
// one worker claims the 16 rows of a burst (two batches of 8), and every
// one of them starts its slow path before any of them ends (locked_node_wait
// is an hour here: a row whose wait had to end before the next row's began
// would keep that one from ever starting). Once the lock goes, all of them
// get a node.
func TestRowsWaitingOnLockedNodesWaitTogether(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	const n = 16
	dbtest.Nodes(t, pool, n, "locked")
	release := lockClass(t, pool, "locked")
	svc, err := NewService(Config{Hostname: "waits", Workers: 1, ClaimBatch: 8, PollInterval: time.Hour,
		LockedNodeWait: time.Hour}, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	svc.signals = newTestSignals(4 * n)
	runService(t, svc)
	burst(t, pool, n, "locked")

	started := map[uuid.UUID]bool{}
	deadline := time.After(60 * time.Second)
	for len(started) < n {
		select {
		case u := <-svc.signals.reserving:
			started[u] = true
		case <-deadline:
			t.Fatalf("%d of %d rows started waiting for a node: the others wait for them to end", len(started), n)
		}
	}
	require.Equal(t, n, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`),
		"a row ended while every node was locked")
	release()
	dbtest.WaitFor(t, 60*time.Second, "every row to get a node once the lock went", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`) == n
	})
}

// BenchmarkLockedRowsTimeToError is issue 26's measure of the slow path:
// with every node of a class locked by a held transaction, a burst of
// allocations (16, then 128; one conductor in the default configuration:
// 16 workers, batches of 8, locked_node_wait 2s) ends in error; it
// reports when the first and the last row ended, since they were created.
func BenchmarkLockedRowsTimeToError(b *testing.B) {
	for _, n := range []int{16, 128} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			pool := dbtest.New(b)
			dbtest.Nodes(b, pool, 16, "locked")
			lockClass(b, pool, "locked")
			svc, err := NewService(Config{Hostname: "bench"}, pool, zaptest.NewLogger(b))
			require.NoError(b, err)
			runService(b, svc)
			var first, last float64
			for b.Loop() {
				burst(b, pool, n, "locked")
				dbtest.WaitFor(b, 10*time.Minute, "every row to end in error", func() bool {
					return dbtest.Count(b, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
				})
				var f, l float64
				require.NoError(b, pool.QueryRow(context.Background(), `
					SELECT min(extract(epoch FROM updated_at - created_at)), max(extract(epoch FROM updated_at - created_at))
					  FROM allocations WHERE state = 'error'`).Scan(&f, &l))
				first, last = first+f, last+l
				_, err := pool.Exec(context.Background(), `DELETE FROM allocations`)
				require.NoError(b, err)
			}
			b.ReportMetric(first/float64(b.N), "s-first")
			b.ReportMetric(last/float64(b.N), "s-last")
		})
	}
}
