package conductor

import (
	"context"
	"fmt"
	"github.com/metalloc/metalloc/conductor/backend"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/placement/placementtest"
)

// BenchmarkGroups measures allocation groups end to end at 10,000 nodes
// (125 racks of 80, topology row/rack): each iteration inserts a wave of
// groups at once (required rack; 100 groups of 8 or 40 of 64, half the
// fleet's room either way), two conductors of 8 workers place them, and
// the wave ends when none is allocating; the groups are then released
// (untimed). Reported: groups/s over the waves, and p50/p99 from a
// group's creation to its activation (updated_at - created_at, database
// clock). Run: bin/metalloc-manage dev exec -- go test ./conductor -run '^$'
// -bench BenchmarkGroups -benchtime 5x
func BenchmarkGroups(b *testing.B) {
	for _, tc := range []struct{ size, wave int }{{8, 100}, {64, 40}} {
		b.Run(fmt.Sprintf("size=%d", tc.size), func(b *testing.B) {
			benchGroups(b, tc.size, tc.wave, nil)
		})
	}
}

// BenchmarkGroupsPlacement is BenchmarkGroups with the conductors on the
// placement backend in mode local: the nodes mirrored into
// metalloc-placement on the same database (SQL, as the resource tracker
// would), each round asking Placement for every candidate and each
// reservation claiming its members there in its transaction. Between
// waves the members' Placement consumers are deleted (the tracker's job,
// untimed). Run: bin/metalloc-manage dev exec -- go test ./conductor
// -run '^$' -bench BenchmarkGroupsPlacement -benchtime 3x
func BenchmarkGroupsPlacement(b *testing.B) {
	for _, tc := range []struct{ size, wave int }{{8, 100}, {64, 40}} {
		b.Run(fmt.Sprintf("size=%d", tc.size), func(b *testing.B) {
			benchGroups(b, tc.size, tc.wave, func(pool *pgxpool.Pool) func(*Config) {
				ctx := context.Background()
				srv := placementtest.NewServerOn(b, pool, placement.Options{})
				pc := client.New(srv.URL, "admin", 30*time.Second)
				require.NoError(b, pc.EnsureResourceClass(ctx, "CUSTOM_GPU"))
				for _, sql := range []string{
					`INSERT INTO placement.resource_providers (uuid, name) SELECT uuid, name FROM nodes`,
					`UPDATE placement.resource_providers SET root_provider_id = id`,
					`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit)
					 SELECT rp.id, rc.id, 1, 1 FROM placement.resource_providers rp
					   JOIN placement.resource_classes rc ON rc.name = 'CUSTOM_GPU'`,
				} {
					_, err := pool.Exec(ctx, sql)
					require.NoError(b, err)
				}
				return func(c *Config) {
					c.Backend, c.Placement, c.PlacementMode = BackendPlacement, pc, backend.PlacementModeLocal
				}
			})
		})
	}
}

// benchGroups runs waves of wave groups of size at 10,000 nodes (see
// BenchmarkGroups); setup, when set, prepares the database and returns
// how to configure the conductors.
func benchGroups(b *testing.B, size, wave int, setup func(*pgxpool.Pool) func(*Config)) {
	pool := dbtest.New(b)
	rackedFleet(b, pool, 125, 80, "gpu")
	ctx := context.Background()
	configure := func(*Config) {}
	if setup != nil {
		configure = setup(pool)
	}
	for i := range 2 {
		cfg := Config{Hostname: fmt.Sprintf("c%d", i), Workers: 8}
		configure(&cfg)
		svc, err := NewService(cfg, pool, benchLog(b))
		require.NoError(b, err)
		runService(b, svc)
	}
	var lat []float64
	var busy time.Duration
	groups := 0
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		_, err := pool.Exec(ctx, `
			INSERT INTO allocation_groups (uuid, count, resource_class, rule, rule_level)
			SELECT gen_random_uuid(), $1, 'gpu', 'required', 'rack' FROM generate_series(1, $2)`, size, wave)
		require.NoError(b, err)
		dbtest.WaitEvery(b, 10*time.Minute, 2*time.Millisecond, "every group to leave allocating", func() bool {
			return dbtest.Count(b, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'allocating'`) == 0
		})
		busy += time.Since(start)
		b.StopTimer()
		rows, err := pool.Query(ctx, `SELECT extract(epoch FROM updated_at - created_at)::float8 * 1000, state
			FROM allocation_groups`)
		require.NoError(b, err)
		for rows.Next() {
			var ms float64
			var state string
			require.NoError(b, rows.Scan(&ms, &state))
			require.Equal(b, "active", state)
			lat = append(lat, ms)
			groups++
		}
		require.NoError(b, rows.Err())
		for _, sql := range []string{
			`SELECT metalloc_deallocate(id) FROM allocations WHERE group_id IS NOT NULL`,
			`DELETE FROM allocation_groups`,
			`DELETE FROM placement.consumers WHERE user_id = 'metalloc'`,
			`DELETE FROM placement_claims`,
		} {
			_, err = pool.Exec(ctx, sql)
			require.NoError(b, err)
		}
		b.StartTimer()
	}
	sort.Float64s(lat)
	b.ReportMetric(float64(groups)/busy.Seconds(), "groups/s")
	b.ReportMetric(float64(groups*size)/busy.Seconds(), "nodes/s")
	b.ReportMetric(lat[len(lat)/2], "p50-ms")
	b.ReportMetric(lat[min(len(lat)-1, len(lat)*99/100)], "p99-ms")
}

// benchLog is a no-op logger, or with GROUPS_BENCH_LOG=path a debug log
// written there (to see the rounds each group needed).
func benchLog(b *testing.B) *zap.Logger {
	path := os.Getenv("GROUPS_BENCH_LOG")
	if path == "" {
		return zap.NewNop()
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.OutputPaths = []string{path}
	log, err := cfg.Build()
	require.NoError(b, err)
	return log
}
