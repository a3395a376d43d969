package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/ironic"
)

// BenchmarkGetAllocation is a polling client's GET /v1/allocations/{uuid}
// through metalloc-api's whole handler (middleware, access rules, the
// read, the JSON, the access log at metalloc-api's default level info,
// encoded and discarded), without the network: what one poll costs the
// API process. "cached" has the event hub, as metalloc-api runs (the answer
// comes from its cache); "read" has none (a database read each time,
// ns/op includes the database's answer time). "front-cached" is
// metalloc-api in front of Ironic, as it runs there (the front knows the
// allocation is metalloc's from the hub's cache: ironic.FrontOptions.Known);
// "front-lookup" is the same without Known (a database lookup per poll
// before the cache answers). Neither sends anything to Ironic.
//
//	bin/metalloc-manage dev exec -- go test ./cmd/api -run '^$' -bench GetAllocation -benchmem
func BenchmarkGetAllocation(b *testing.B) {
	for _, name := range []string{"cached", "read", "front-cached", "front-lookup"} {
		cached := name != "read"
		front := strings.HasPrefix(name, "front")
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
			var fr *ironic.Front
			if front {
				var proxied atomic.Int64
				ir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if strings.HasPrefix(r.URL.Path, "/v1/allocations") {
						proxied.Add(1)
					}
					w.WriteHeader(http.StatusServiceUnavailable)
				}))
				b.Cleanup(func() {
					ir.Close()
					if n := proxied.Load(); n > 0 {
						b.Errorf("%d GETs of metalloc's allocation went to Ironic", n)
					}
				})
				cfg.Ironic.Endpoint = ir.URL
				known := hub.Has
				if name == "front-lookup" {
					known = nil
				}
				fr, err = newFront(cfg, pool, known, log)
				require.NoError(b, err)
				b.Cleanup(fr.Close)
			}
			e, err := newAPIWith(cfg, pool, auth.IronicNoAuth{}, auth.Rules{}, hub, fr, log)
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
