package conductor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
)

// TestHousekeepVacuumsAllocations: a conductor vacuums the allocations table
// itself once it holds housekeepDeadRows dead rows.
func TestHousekeepVacuumsAllocations(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	// Autovacuum must not clear the dead rows first.
	_, err := pool.Exec(ctx, `ALTER TABLE allocations SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO allocations (uuid, resource_class, state, last_error)
		SELECT gen_random_uuid(), 'gold', 'error', 'x' FROM generate_series(1, $1::int)`, housekeepDeadRows+100)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM allocations`)
	require.NoError(t, err)
	dbtest.WaitFor(t, 15*time.Second, "the dead rows to be counted", func() bool {
		return dbtest.Count(t, pool, `SELECT pg_stat_get_dead_tuples('allocations'::regclass)`) >= housekeepDeadRows
	})
	start(t, pool, Config{Hostname: "housekeeper", PollInterval: time.Hour})
	dbtest.WaitFor(t, 4*housekeepInterval, "the conductor to vacuum allocations", func() bool {
		return dbtest.Count(t, pool, `SELECT pg_stat_get_vacuum_count('allocations'::regclass)`) > 0
	})
}
