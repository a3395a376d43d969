package placement

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// BenchmarkClaim measures PUT /allocations/{consumer} (microversion 1.28,
// new consumer, 1 VCPU) over HTTP against 1,000 providers that each have
// VCPU inventory, on a real database: sequentially and with 8 concurrent
// clients. It reports claims/s.
//
//	make build && bin/metalloc-manage dev exec -- go test -run '^$' -bench Claim -benchtime 3s ./placement/
func BenchmarkClaim(b *testing.B) {
	srv, pool := invServer(b)
	ctx := context.Background()
	const providers = 1000
	_, err := pool.Exec(ctx, `
		INSERT INTO placement.resource_providers (uuid, name)
		SELECT gen_random_uuid(), 'bench-' || g FROM generate_series(1, $1) g`, providers)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit)
		SELECT id, 0, 2000000000, 2000000000 FROM placement.resource_providers`)
	require.NoError(b, err)
	var rps []string
	rows, err := pool.Query(ctx, `SELECT uuid::text FROM placement.resource_providers ORDER BY id`)
	require.NoError(b, err)
	for rows.Next() {
		var s string
		require.NoError(b, rows.Scan(&s))
		rps = append(rps, s)
	}
	require.NoError(b, rows.Err())

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	var next atomic.Int64
	claim := func() error {
		i := next.Add(1)
		body := fmt.Sprintf(`{"allocations": {"%s": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u",
			"consumer_generation": null}`, rps[int(i)%providers])
		req, err := http.NewRequest("PUT", srv.URL+"/allocations/"+uuid.NewString(), strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("X-Auth-Token", "admin")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("OpenStack-API-Version", "placement 1.28")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}

	b.Run("sequential", func(b *testing.B) {
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if err := claim(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "claims/s")
	})
	b.Run("concurrent8", func(b *testing.B) {
		const clients = 8
		var wg sync.WaitGroup
		var failed atomic.Value
		var left atomic.Int64
		left.Store(int64(b.N))
		start := time.Now()
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for left.Add(-1) >= 0 {
					if err := claim(); err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "claims/s")
		if err, ok := failed.Load().(error); ok {
			b.Fatal(err)
		}
	})
}
