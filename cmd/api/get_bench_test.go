package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db/dbtest"
)

// BenchmarkGetAllocation is a polling client's GET /v1/allocations/{uuid}
// through metalloc-api's whole handler (middleware, access rules, the
// read, the JSON), without the network: what one poll costs the API
// process (ns/op includes the database's answer time; -cpuprofile shows
// the API's own part).
//
//	bin/metalloc-manage dev exec -- go test ./cmd/api -run '^$' -bench GetAllocation -benchmem
func BenchmarkGetAllocation(b *testing.B) {
	pool := dbtest.New(b)
	cfg, err := config.Load("", nil)
	require.NoError(b, err)
	e, err := newAPI(cfg, pool, auth.IronicNoAuth{}, auth.Rules{}, nil, zap.NewNop())
	require.NoError(b, err)
	_, node := dbtest.Node(b, pool, dbtest.NodeSpec{Name: "n1"})
	var nodeID int64
	require.NoError(b, pool.QueryRow(b.Context(), `SELECT id FROM nodes WHERE uuid = $1`, node).Scan(&nodeID))
	_, u := dbtest.Allocation(b, pool, dbtest.AllocationSpec{Traits: []string{"CUSTOM_A"}})
	path := "/v1/allocations/" + u.String()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
	}
}
