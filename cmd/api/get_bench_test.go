package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db/dbtest"
)

// BenchmarkGetAllocation is a polling client's GET /v1/allocations/{uuid}
// through metalloc-api's whole handler (middleware, access rules, the
// read, the JSON, the access log at metalloc-api's default level info,
// encoded and discarded), without the network: what one poll costs the
// API process. "cached" has the event hub, as metalloc-api runs (the answer
// comes from its cache); "read" has none (a database read each time,
// ns/op includes the database's answer time).
//
//	bin/metalloc-manage dev exec -- go test ./cmd/api -run '^$' -bench GetAllocation -benchmem
func BenchmarkGetAllocation(b *testing.B) {
	for _, cached := range []bool{true, false} {
		name := "read"
		if cached {
			name = "cached"
		}
		b.Run(name, func(b *testing.B) {
			pool := dbtest.New(b)
			cfg, err := config.Load("", nil)
			require.NoError(b, err)
			var hub *allocation.Hub
			if cached {
				hub = allocation.NewHub(pool, allocation.HubOptions{})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); hub.Run(ctx) }()
				b.Cleanup(func() { cancel(); <-done })
			}
			log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
				zapcore.AddSync(io.Discard), zapcore.InfoLevel))
			e, err := newAPI(cfg, pool, auth.IronicNoAuth{}, auth.Rules{}, hub, log)
			require.NoError(b, err)
			_, u := dbtest.Allocation(b, pool, dbtest.AllocationSpec{Traits: []string{"CUSTOM_A"}})
			path := "/v1/allocations/" + u.String()
			get := func() {
				req := httptest.NewRequest(http.MethodGet, path, nil)
				req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
				}
			}
			if cached { // until the hub listens and the first read fills the cache
				deadline := time.Now().Add(30 * time.Second)
				for hits, _ := hub.CacheStats(); hits == 0 && time.Now().Before(deadline); hits, _ = hub.CacheStats() {
					get()
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				get()
			}
		})
	}
}
