package allocation

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
)

// TestEventNumberingPlanIgnoresStatistics is bench first-burst's
// "ANALYZE first" case (issue 44) in small: allocation_events analyzed
// empty, a session that numbered then (its plans made on one estimated
// row), then a burst's worth of events. Every statement of the numbering
// must still read allocation_events by a key or by the unnumbered events'
// index: before migration 00051 its UPDATE read the whole of
// allocation_events_pkey and rescanned the unnumbered events per row
// (a join filter), 3.9 s a call by the end of a burst of 3,000.
func TestEventNumberingPlanIgnoresStatistics(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `ANALYZE allocation_events, allocation_events_meta`)
	require.NoError(t, err)

	var mu sync.Mutex
	var plans []string
	cfg, err := pgx.ParseConfig(pool.Config().ConnConfig.ConnString())
	require.NoError(t, err)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.Contains(n.Message, "plan:") {
			mu.Lock()
			plans = append(plans, n.Message)
			mu.Unlock()
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, s := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`, `SET auto_explain.log_level = notice`} {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err)
	}
	number := func() int64 {
		var n int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT metalloc_sequence_allocation_events()`).Scan(&n))
		return n
	}
	// Plans made on the empty table (the API numbers while no allocation
	// was made yet: streams opening, the pruner), each statement of the
	// function run more than five times (PL/pgSQL then keeps a generic plan if it
	// costs no more than the custom ones: made on one estimated row, it is
	// kept however the table grows, until the next ANALYZE).
	insert := func(n int) {
		_, err := pool.Exec(ctx, `INSERT INTO allocation_events (kind, allocation_uuid, state, resource_class)
			SELECT 'created', gen_random_uuid(), 'allocating', 'gold' FROM generate_series(1, $1)`, n)
		require.NoError(t, err)
	}
	for range 8 {
		require.EqualValues(t, 0, number())
	}
	insert(8)
	require.EqualValues(t, 8, number())
	// A burst's events since, some numbered already.
	insert(3000)
	require.EqualValues(t, 3000, number())
	insert(500)
	mu.Lock()
	plans = nil
	mu.Unlock()
	require.EqualValues(t, 500, number())

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, plans)
	for _, p := range plans {
		require.NotContains(t, p, "Join Filter", "a nested loop rescanning one side per row of the other:\n%s", p)
		require.NotContains(t, p, "Seq Scan on allocation_events ", p)
		if strings.Contains(p, "Index Scan using allocation_events_pkey") {
			require.Contains(t, p, "Index Cond: (id = ", "allocation_events_pkey read whole:\n%s", p)
		}
	}
	var last int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT last_seq FROM allocation_events_meta`).Scan(&last))
	var numbered, distinct, top int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(seq), count(DISTINCT seq), max(seq) FROM allocation_events`).
		Scan(&numbered, &distinct, &top))
	require.EqualValues(t, 3508, numbered)
	require.Equal(t, numbered, distinct)
	require.Equal(t, last, top)
	// Numbered in id order.
	var outOfOrder int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM allocation_events a JOIN allocation_events b
		ON a.id < b.id AND a.seq > b.seq WHERE a.id > (SELECT max(id) - 600 FROM allocation_events)`).Scan(&outOfOrder))
	require.Zero(t, outOfOrder)
}
