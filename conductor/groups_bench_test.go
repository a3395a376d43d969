package conductor

import (
	"context"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db/dbtest"
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
			pool := dbtest.New(b)
			rackedFleet(b, pool, 125, 80, "gpu")
			ctx := context.Background()
			for i := range 2 {
				svc, err := NewService(Config{Hostname: fmt.Sprintf("c%d", i), Workers: 8}, pool, benchLog(b))
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
					SELECT gen_random_uuid(), $1, 'gpu', 'required', 'rack' FROM generate_series(1, $2)`, tc.size, tc.wave)
				require.NoError(b, err)
				for dbtest.Count(b, pool, `SELECT count(*) FROM allocation_groups WHERE state = 'allocating'`) > 0 {
					time.Sleep(2 * time.Millisecond)
				}
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
				_, err = pool.Exec(ctx, `SELECT metalloc_deallocate(id) FROM allocations WHERE group_id IS NOT NULL`)
				require.NoError(b, err)
				_, err = pool.Exec(ctx, `DELETE FROM allocation_groups`)
				require.NoError(b, err)
				b.StartTimer()
			}
			sort.Float64s(lat)
			b.ReportMetric(float64(groups)/busy.Seconds(), "groups/s")
			b.ReportMetric(float64(groups*tc.size)/busy.Seconds(), "nodes/s")
			b.ReportMetric(lat[len(lat)/2], "p50-ms")
			b.ReportMetric(lat[min(len(lat)-1, len(lat)*99/100)], "p99-ms")
		})
	}
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
