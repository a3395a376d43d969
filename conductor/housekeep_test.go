package conductor

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// TestPruneOfflineConductors: the rows of conductors gone for longer than
// the retention go; a live one, one dead for less than the retention, one
// that still owns an allocating row or group, and one whose process still
// has a session open on this database (paused) stay.
func TestPruneOfflineConductors(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	week := 7 * 24 * time.Hour
	dbtest.Conductor(t, pool, "alive", 0, true)
	dbtest.Conductor(t, pool, "gone-long-ago", 8*24*time.Hour, false)
	dbtest.Conductor(t, pool, "crashed-long-ago", 8*24*time.Hour, true) // online, but its heartbeat stopped
	dbtest.Conductor(t, pool, "gone-yesterday", 24*time.Hour, false)
	owner := dbtest.Conductor(t, pool, "owns-a-row", 8*24*time.Hour, false)
	dbtest.Allocation(t, pool, dbtest.AllocationSpec{Conductor: owner})
	groupOwner := dbtest.Conductor(t, pool, "owns-a-group", 8*24*time.Hour, false)
	_, err := pool.Exec(ctx, `INSERT INTO allocation_groups (uuid, resource_class, count, state, conductor_affinity)
		VALUES (gen_random_uuid(), 'gold', 1, 'allocating', $1)`, groupOwner)
	require.NoError(t, err)
	dbtest.Conductor(t, pool, "paused", 8*24*time.Hour, true)
	cfg := pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "metalloc-conductor paused"
	session, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer session.Close(context.Background())
	// A session of that name on another database of the server is another
	// cluster's conductor (tests share a server, so do deployments): it
	// does not keep this database's row.
	dbtest.Conductor(t, pool, "elsewhere", 8*24*time.Hour, true)
	other, err := pgx.ParseConfig(dbtest.NewURL(t))
	require.NoError(t, err)
	other.RuntimeParams["application_name"] = "metalloc-conductor elsewhere"
	otherSession, err := pgx.ConnectConfig(ctx, other)
	require.NoError(t, err)
	defer otherSession.Close(context.Background())

	p := NewPruner(pool, PrunerConfig{Retention: week, HeartbeatTimeout: time.Minute}, nil)
	gone, err := p.Prune(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"gone-long-ago", "crashed-long-ago", "elsewhere"}, gone)
	var left []string
	rows, err := pool.Query(ctx, `SELECT hostname FROM conductors ORDER BY hostname`)
	require.NoError(t, err)
	for rows.Next() {
		var h string
		require.NoError(t, rows.Scan(&h))
		left = append(left, h)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"alive", "gone-yesterday", "owns-a-group", "owns-a-row", "paused"}, left)

	// Once the row is no longer allocating, the owner goes too; a
	// negative retention prunes nothing.
	_, err = pool.Exec(ctx, `UPDATE allocations SET state = 'error', last_error = 'x' WHERE conductor_affinity = $1`, owner)
	require.NoError(t, err)
	none, err := NewPruner(pool, PrunerConfig{Retention: -1}, nil).Prune(ctx)
	require.NoError(t, err)
	require.Empty(t, none)
	gone, err = p.Prune(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"owns-a-row"}, gone)
}
