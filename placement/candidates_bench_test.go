package placement

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// BenchmarkAllocationCandidates times GET /allocation_candidates over HTTP
// (microversion 1.39) on compute-like providers: VCPU 64 (ratio 4),
// MEMORY_MB 256 GiB (ratio 1.5), DISK_GB 2000, HW_CPU_X86_AVX2 on every
// other one and CUSTOM_RACK_<n> traits, in aggregates of 50, each
// aggregate with one sharing DISK_GB provider (so every compute gives two
// candidates: local disk and shared disk). Each case reports p50 and p95
// in ms, the response size, and the peak RSS of the test process (which
// serves the API in-process, so this bounds the placement process's).
//
//	make build && bin/metalloc-manage dev exec -- go test -run '^$' -bench AllocationCandidates ./placement/
//	METALLOC_BENCH_100K=1 bin/metalloc-manage dev exec -- go test -run '^$' -bench AllocationCandidates/100000 -timeout 30m ./placement/
func BenchmarkAllocationCandidates(b *testing.B) {
	sizes := []int{1000}
	if os.Getenv("METALLOC_BENCH_100K") != "" {
		sizes = append(sizes, 100000)
	}
	for _, n := range sizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			srv, pool := invServer(b)
			agg0 := buildComputeProviders(b, pool, n)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			base := "/allocation_candidates?resources=VCPU:1,MEMORY_MB:256,DISK_GB:10"
			cases := []struct {
				name, query string
				limited     bool
			}{
				{"nolimit", base, false},
				{"limit50", base + "&limit=50", true},
				{"required", base + "&required=HW_CPU_X86_AVX2", false},
				{"member_of", base + "&member_of=" + agg0, true},
				{"required_limit50", base + "&required=HW_CPU_X86_AVX2&limit=50", true},
				{"member_of_limit50", base + "&member_of=" + agg0 + "&limit=50", true},
			}
			for _, c := range cases {
				if n > 1000 && !c.limited && os.Getenv("METALLOC_BENCH_100K_ALL") == "" {
					continue // the unlimited queries at 100k answer 200,000 candidates (80 MB)
				}
				b.Run(c.name, func(b *testing.B) {
					timeCandidates(b, client, srv.URL+c.query)
					b.ReportMetric(peakRSSMB(), "peak-rss-MB")
				})
			}
		})
	}
}

// buildComputeProviders inserts n computes plus n/50 sharing providers and
// returns the uuid of the first aggregate.
func buildComputeProviders(b testing.TB, pool *pgxpool.Pool, n int) string {
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(b, err)
	}
	aggs := (n + 49) / 50
	exec(`CREATE TABLE IF NOT EXISTS bench_aggs AS
		SELECT g AS n, gen_random_uuid() AS agg FROM generate_series(0, $1 - 1) g`, aggs)
	exec(`INSERT INTO placement.resource_providers (uuid, name)
		SELECT gen_random_uuid(), 'cn-' || g FROM generate_series(0, $1 - 1) g`, n)
	exec(`INSERT INTO placement.resource_providers (uuid, name)
		SELECT gen_random_uuid(), 'shared-disk-' || g FROM generate_series(0, $1 - 1) g`, aggs)
	exec(`UPDATE placement.resource_providers SET root_provider_id = id`)
	exec(`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit, allocation_ratio)
		SELECT id, 0, 64, 64, 4.0 FROM placement.resource_providers WHERE name LIKE 'cn-%'
		UNION ALL SELECT id, 1, 262144, 262144, 1.5 FROM placement.resource_providers WHERE name LIKE 'cn-%'
		UNION ALL SELECT id, 2, 2000, 2000, 1.0 FROM placement.resource_providers WHERE name LIKE 'cn-%'
		UNION ALL SELECT id, 2, 100000, 100000, 1.0 FROM placement.resource_providers WHERE name LIKE 'shared-disk-%'`)
	exec(`INSERT INTO placement.traits (name)
		SELECT 'CUSTOM_RACK_' || g FROM generate_series(0, 9) g ON CONFLICT DO NOTHING`)
	exec(`INSERT INTO placement.resource_provider_traits (resource_provider_id, trait_id)
		SELECT rp.id, t.id FROM placement.resource_providers rp, placement.traits t
		 WHERE rp.name LIKE 'cn-%' AND t.name IN ('HW_CPU_X86_AVX2', 'HW_CPU_X86_SSE42')
		   AND (t.name <> 'HW_CPU_X86_AVX2' OR split_part(rp.name, '-', 2)::int % 2 = 0)
		UNION ALL
		SELECT rp.id, t.id FROM placement.resource_providers rp, placement.traits t
		 WHERE rp.name LIKE 'cn-%' AND t.name = 'CUSTOM_RACK_' || (split_part(rp.name, '-', 2)::int % 10)
		UNION ALL
		SELECT rp.id, t.id FROM placement.resource_providers rp, placement.traits t
		 WHERE rp.name LIKE 'shared-disk-%' AND t.name = 'MISC_SHARES_VIA_AGGREGATE'`)
	exec(`INSERT INTO placement.resource_provider_aggregates (resource_provider_id, aggregate_uuid)
		SELECT rp.id, a.agg FROM placement.resource_providers rp JOIN bench_aggs a
		    ON a.n = split_part(rp.name, '-', 2)::int / 50 WHERE rp.name LIKE 'cn-%'
		UNION ALL
		SELECT rp.id, a.agg FROM placement.resource_providers rp JOIN bench_aggs a
		    ON a.n = split_part(rp.name, '-', 3)::int WHERE rp.name LIKE 'shared-disk-%'`)
	// Some usage: one consumer on every tenth compute.
	exec(`INSERT INTO placement.consumers (uuid, project_id, user_id)
		SELECT gen_random_uuid(), 'p', 'u' FROM generate_series(1, $1 / 10)`, n)
	exec(`INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
		SELECT rp.id, c.id, rc, amt
		  FROM (SELECT id, row_number() OVER (ORDER BY id) AS k FROM placement.resource_providers WHERE name LIKE 'cn-%') rp
		  JOIN (SELECT id, row_number() OVER (ORDER BY id) AS k FROM placement.consumers) c ON rp.k = c.k * 10
		 CROSS JOIN (VALUES (0, 2), (1, 2048), (2, 20)) v(rc, amt)`)
	// As autovacuum leaves a settled database: statistics, visibility map
	// and hint bits (else the first case pays for setting them).
	exec(`VACUUM ANALYZE`)
	var agg string
	require.NoError(b, pool.QueryRow(ctx, `SELECT agg::text FROM bench_aggs WHERE n = 0`).Scan(&agg))
	return agg
}

// timeCandidates sends url b.N times and reports the p50 and p95 latency
// (request to whole response read, as the client sees it) and the
// response size.
func timeCandidates(b *testing.B, client *http.Client, url string) {
	var lat []time.Duration
	var size int
	for i := 0; i < b.N; i++ {
		start := time.Now()
		n, err := getCandidates(client, url)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		size = n
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(size), "resp-bytes")
}

// getCandidates sends the query and returns the body size.
func getCandidates(client *http.Client, url string) (int, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Auth-Token", "admin")
	req.Header.Set("OpenStack-API-Version", "placement 1.39")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	return int(n), nil
}

// peakRSSMB is VmHWM of this process in MB (0 when unknown).
func peakRSSMB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

// BenchmarkAllocationCandidatesWideTrees times GET /allocation_candidates
// on wide nested trees, the case of Placement bug 2070257: 20 roots with 8
// children each holding VCPU, asked for 6 granular groups of VCPU:1 with
// group_policy=isolate. A root has 8^6 = 262,144 combinations of
// children, 20,160 of them valid: a limited request must cost its limit,
// not the product (limit1000 reaches into the second root).
//
//	make build && bin/metalloc-manage dev exec -- go test -run '^$' -bench AllocationCandidatesWideTrees ./placement/
func BenchmarkAllocationCandidatesWideTrees(b *testing.B) {
	srv, pool := invServer(b)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(b, err)
	}
	const roots, children = 20, 8
	exec(`INSERT INTO placement.resource_providers (uuid, name)
		SELECT gen_random_uuid(), 'root-' || g FROM generate_series(0, $1 - 1) g`, roots)
	exec(`UPDATE placement.resource_providers SET root_provider_id = id`)
	exec(`INSERT INTO placement.resource_providers (uuid, name, parent_provider_id, root_provider_id)
		SELECT gen_random_uuid(), r.name || '-child-' || c, r.id, r.id
		  FROM placement.resource_providers r, generate_series(0, $1 - 1) c`, children)
	exec(`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit, allocation_ratio)
		SELECT id, 0, 4, 4, 1.0 FROM placement.resource_providers WHERE parent_provider_id IS NOT NULL`)
	exec(`ANALYZE`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	q := "/allocation_candidates?group_policy=isolate"
	for g := 1; g <= 6; g++ {
		q += fmt.Sprintf("&resources%d=VCPU:1", g)
	}
	for _, limit := range []int{1, 50, 1000} {
		b.Run("limit"+strconv.Itoa(limit), func(b *testing.B) {
			timeCandidates(b, client, srv.URL+q+"&limit="+strconv.Itoa(limit))
		})
	}
}

// BenchmarkAllocationCandidatesBareMetal times GET /allocation_candidates
// on flat bare-metal providers as the resource tracker mirrors Ironic
// nodes: each provider has one unit of one of 4 custom classes and one of
// 4 traits, half of them allocated (runs of 16 providers), asked as the
// placement backend's scheduler asks (one class, optionally a trait, the
// local mode's limit of 240, or 50). 10,000 providers search the cached
// world; 30,000 (above the in-memory threshold of limited requests) the
// batched SQL walk.
//
//	make build && bin/metalloc-manage dev exec -- go test -run '^$' -bench AllocationCandidatesBareMetal ./placement/
func BenchmarkAllocationCandidatesBareMetal(b *testing.B) {
	for _, n := range []int{10000, 30000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			srv, pool := invServer(b)
			ctx := context.Background()
			for _, sql := range []string{
				`INSERT INTO placement.resource_classes (id, name)
					SELECT 10000 + g, 'CUSTOM_BAREMETAL_' || g FROM generate_series(0, 3) g`,
				`INSERT INTO placement.traits (name)
					SELECT 'CUSTOM_T' || g FROM generate_series(0, 3) g ON CONFLICT DO NOTHING`,
				`INSERT INTO placement.resource_providers (uuid, name)
					SELECT gen_random_uuid(), 'node-' || g FROM generate_series(0, $1 - 1) g`,
				`UPDATE placement.resource_providers SET root_provider_id = id`,
				`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit)
					SELECT id, 10000 + id % 4, 1, 1 FROM placement.resource_providers`,
				`INSERT INTO placement.resource_provider_traits (resource_provider_id, trait_id)
					SELECT rp.id, t.id FROM placement.resource_providers rp, placement.traits t
					 WHERE t.name = 'CUSTOM_T' || (rp.id / 4) % 4`,
				`INSERT INTO placement.consumers (uuid, project_id, user_id)
					SELECT gen_random_uuid(), 'p', 'u' FROM placement.resource_providers WHERE (id / 16) % 2 = 0`,
				`INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
					SELECT rp.id, c.id, 10000 + rp.id % 4, 1
					  FROM (SELECT id, row_number() OVER (ORDER BY id) k FROM placement.resource_providers WHERE (id / 16) % 2 = 0) rp
					  JOIN (SELECT id, row_number() OVER (ORDER BY id) k FROM placement.consumers) c USING (k)`,
				`VACUUM ANALYZE`,
			} {
				var args []any
				if strings.Contains(sql, "$1") {
					args = []any{n}
				}
				_, err := pool.Exec(ctx, sql, args...)
				require.NoError(b, err, sql)
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			for _, c := range []struct{ name, query string }{
				{"limit240", "resources=CUSTOM_BAREMETAL_1:1&limit=240"},
				{"trait_limit240", "resources=CUSTOM_BAREMETAL_1:1&required=CUSTOM_T2&limit=240"},
				{"trait_limit50", "resources=CUSTOM_BAREMETAL_3:1&required=CUSTOM_T0&limit=50"},
			} {
				b.Run(c.name, func(b *testing.B) {
					timeCandidates(b, client, srv.URL+"/allocation_candidates?"+c.query)
				})
			}
		})
	}
}
