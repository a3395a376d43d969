package backend

import (
	"context"
	"fmt"
	"github.com/metalloc/metalloc/allocation"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/placement/placementtest"
)

// benchWorld is a test database with nodes of classes bench-0 ...
// bench-<classes-1> mirrored into an in-process metalloc-placement as the
// resource tracker would (randomized candidates), and allocations of those
// classes owned by one conductor.
type benchWorld struct {
	pool   *pgxpool.Pool
	pc     *client.Client
	me     int64
	claims []Claimed
}

// newBenchWorld makes n + allocs nodes (round robin over the classes) and
// allocs allocations.
func newBenchWorld(b *testing.B, n, allocs, classes int) *benchWorld {
	ctx := context.Background()
	pool := dbtest.New(b)
	srv := placementtest.NewServerOn(b, pool, placement.Options{RandomizeAllocationCandidates: true})
	pc := client.New(srv.URL, "admin", 30*time.Second)
	exec := func(sql string, args ...any) {
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(b, err)
	}
	total := n + allocs
	for c := range classes {
		rc := fmt.Sprintf("bench-%d", c)
		require.NoError(b, pc.EnsureResourceClass(ctx, client.NormalizeClass(rc)))
		dbtest.Nodes(b, pool, (total+classes-1-c)/classes, rc)
	}
	exec(`INSERT INTO placement.resource_providers (uuid, name) SELECT uuid, name FROM nodes`)
	exec(`UPDATE placement.resource_providers SET root_provider_id = id`)
	exec(`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit)
		SELECT rp.id, rc.id, 1, 1 FROM placement.resource_providers rp
		  JOIN nodes n ON n.uuid = rp.uuid
		  JOIN placement.resource_classes rc ON rc.name = 'CUSTOM_' || upper(replace(n.resource_class, '-', '_'))`)
	exec(`INSERT INTO conductors (hostname) VALUES ('bench')`)
	w := &benchWorld{pool: pool, pc: pc}
	require.NoError(b, pool.QueryRow(ctx, `SELECT id FROM conductors`).Scan(&w.me))
	exec(`ANALYZE`)
	q := allocation.New(pool)
	w.claims = make([]Claimed, allocs)
	for i := range w.claims {
		rc := fmt.Sprintf("bench-%d", i%classes)
		row, err := q.CreateAllocation(ctx, allocation.CreateAllocationParams{Uuid: uuid.New(), ResourceClass: rc,
			Extra: []byte("{}"), State: allocation.StateAllocating, Traits: []string{}})
		require.NoError(b, err)
		w.claims[i] = Claimed{ID: row.ID, UUID: row.Uuid, ResourceClass: rc, Traits: []string{}}
	}
	exec(`UPDATE allocations SET conductor_affinity = $1`, w.me)
	return w
}

// benchNodes is METALLOC_BENCH_NODES, or def.
func benchNodes(def int) int {
	if v, err := strconv.Atoi(os.Getenv("METALLOC_BENCH_NODES")); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkPlacementProcess times Placement.Process, the placement
// backend's work for one allocation (candidates, claim, reservation),
// against an in-process metalloc-placement on the test database, over HTTP
// and in-process (mode local), with nodes of one class mirrored as the
// resource tracker would (2,000 by default; METALLOC_BENCH_NODES sets it).
// "seq" is one worker, "c16" 16 workers of one conductor racing. Reports
// p50/p99 per allocation.
//
//	make build && bin/metalloc-manage dev exec -- go test -run '^$' -bench PlacementProcess ./allocation/
func BenchmarkPlacementProcess(b *testing.B) {
	n := benchNodes(2000)
	for _, mode := range []string{PlacementModeHTTP, PlacementModeLocal} {
		for _, workers := range []int{1, 16} {
			name := "seq"
			if workers > 1 {
				name = "c" + strconv.Itoa(workers)
			}
			b.Run(mode+"/"+name, func(b *testing.B) {
				ctx := context.Background()
				w := newBenchWorld(b, n, b.N, 1)
				pa := NewPlacement(w.pool, w.pc, PlacementConfig{Hostname: "bench", Mode: mode}, zap.NewNop())
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
							out, err := settle(ctx, pa, w.me, w.claims[i])
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
}

// BenchmarkPlacementClaimBatch times Placement.ClaimBatch, what a
// placement-backend conductor does per claimed batch (8 rows of 4 classes,
// as the allocations bench makes them), with 16 workers
// (METALLOC_BENCH_WORKERS sets it), over HTTP and
// in-process; rows the batch leaves go through Process. Reports
// allocations/s (500 nodes by default; METALLOC_BENCH_NODES sets it).
//
//	bin/metalloc-manage dev exec -- go test -run '^$' -bench PlacementClaimBatch ./allocation/
func BenchmarkPlacementClaimBatch(b *testing.B) {
	n := benchNodes(500)
	for _, mode := range []string{PlacementModeHTTP, PlacementModeLocal} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			w := newBenchWorld(b, n, b.N, 4)
			pa := NewPlacement(w.pool, w.pc, PlacementConfig{Hostname: "bench", Mode: mode}, zap.NewNop())
			next := make(chan []Claimed, b.N/8+1)
			for i := 0; i < b.N; i += 8 {
				next <- w.claims[i:min(i+8, b.N)]
			}
			close(next)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failed []string
			var batched int
			b.ResetTimer()
			start := time.Now()
			workers := 16
			if v, err := strconv.Atoi(os.Getenv("METALLOC_BENCH_WORKERS")); err == nil && v > 0 {
				workers = v
			}
			for range workers {
				wg.Go(func() {
					for batch := range next {
						reserved, rest := pa.ClaimBatch(ctx, w.me, batch)
						mu.Lock()
						batched += len(reserved)
						mu.Unlock()
						for _, c := range rest {
							out, err := settle(ctx, pa, w.me, c)
							if err != nil || out != Reserved {
								mu.Lock()
								failed = append(failed, fmt.Sprintf("%s: %v", out, err))
								mu.Unlock()
							}
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			require.Empty(b, failed)
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "allocs/s")
			b.ReportMetric(float64(batched)/float64(b.N), "batched")
		})
	}
}
