package allocation

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/placement/placementtest"
)

// BenchmarkPlacementProcess times PlacementAllocator.Process, the placement
// backend's work for one allocation (candidates, claim, reservation),
// against an in-process metalloc-placement on the test database, with
// nodes of one class mirrored as the resource tracker would (2,000 by
// default; METALLOC_BENCH_NODES sets it). "seq" is one worker, "c16" 16
// workers of one conductor racing. Reports p50/p99 per allocation.
//
//	make build && bin/metalloc-manage dev exec -- go test -run '^$' -bench PlacementProcess ./allocation/
func BenchmarkPlacementProcess(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("METALLOC_BENCH_NODES")); err == nil && v > 0 {
		n = v
	}
	for _, workers := range []int{1, 16} {
		name := "seq"
		if workers > 1 {
			name = "c" + strconv.Itoa(workers)
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			pool := dbtest.New(b)
			srv := placementtest.NewServerOn(b, pool, placement.Options{RandomizeAllocationCandidates: true})
			pc := client.New(srv.URL, "admin", 30*time.Second)
			require.NoError(b, pc.EnsureResourceClass(ctx, "CUSTOM_GOLD"))
			exec := func(sql string, args ...any) {
				_, err := pool.Exec(ctx, sql, args...)
				require.NoError(b, err)
			}
			// Nodes and their providers, b.N of them free (plus n).
			total := n + b.N
			dbtest.Nodes(b, pool, total, "gold")
			exec(`INSERT INTO placement.resource_providers (uuid, name) SELECT uuid, name FROM nodes`)
			exec(`UPDATE placement.resource_providers SET root_provider_id = id`)
			exec(`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit)
				SELECT rp.id, rc.id, 1, 1 FROM placement.resource_providers rp, placement.resource_classes rc
				 WHERE rc.name = 'CUSTOM_GOLD'`)
			exec(`INSERT INTO conductors (hostname) VALUES ('bench')`)
			var me int64
			require.NoError(b, pool.QueryRow(ctx, `SELECT id FROM conductors`).Scan(&me))
			exec(`ANALYZE`)
			q := New(pool)
			claims := make([]Claimed, b.N)
			for i := range claims {
				row, err := q.CreateAllocation(ctx, CreateAllocationParams{Uuid: uuid.New(), ResourceClass: "gold",
					Extra: []byte("{}"), State: StateAllocating, Traits: []string{}})
				require.NoError(b, err)
				claims[i] = Claimed{ID: row.ID, UUID: row.Uuid, ResourceClass: "gold", Traits: []string{}}
			}
			exec(`UPDATE allocations SET conductor_affinity = $1`, me)
			pa := NewPlacementAllocator(pool, pc, PlacementConfig{Hostname: "bench"}, zap.NewNop())
			lat := make([]time.Duration, b.N)
			next := make(chan int, b.N)
			for i := range b.N {
				next <- i
			}
			close(next)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failed []string
			b.ResetTimer()
			for range workers {
				wg.Go(func() {
					for i := range next {
						start := time.Now()
						out, err := pa.Process(ctx, me, claims[i])
						lat[i] = time.Since(start)
						if err != nil || out != Reserved {
							mu.Lock()
							failed = append(failed, fmt.Sprintf("%s: %v", out, err))
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			require.Empty(b, failed)
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
