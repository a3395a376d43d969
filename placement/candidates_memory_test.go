package placement

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/placement/candidate"
)

// wideTree inserts issue 26's case: one root with 8 children holding 6
// VCPU each, and returns the query of 6 granular groups of VCPU:1 with
// group_policy=none, no limit: 8^6 = 262,144 candidates.
func wideTree(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO placement.resource_providers (uuid, name) VALUES (gen_random_uuid(), 'root')`,
		`UPDATE placement.resource_providers SET root_provider_id = id`,
		`INSERT INTO placement.resource_providers (uuid, name, parent_provider_id, root_provider_id)
			SELECT gen_random_uuid(), 'child-' || c, r.id, r.id FROM placement.resource_providers r, generate_series(1, 8) c`,
		`INSERT INTO placement.inventories (resource_provider_id, resource_class_id, total, max_unit)
			SELECT id, 0, 6, 6 FROM placement.resource_providers WHERE parent_provider_id IS NOT NULL`,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	q := "/allocation_candidates?group_policy=none"
	for g := 1; g <= 6; g++ {
		q += fmt.Sprintf("&resources%d=VCPU:1", g)
	}
	return q
}

// getBody sends GET path at 1.39 to srv and passes the body to w; it
// returns the status.
func getBody(t *testing.T, srv *httptest.Server, path string, w io.Writer) int {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("X-Auth-Token", "admin")
	req.Header.Set("OpenStack-API-Version", "placement 1.39")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	require.NoError(t, err)
	return resp.StatusCode
}

// countingWriter counts the bytes written to it.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// TestCandidatesMemoryBounded (issue 26, item 6): an unbounded answer of
// 262,144 candidates (161 MB of JSON) costs the server a few hundred KB of
// memory, not a copy of the candidates: they are written as they are
// found. Measured as the bytes the process allocates during the request
// (server and client are in this process; the test is not parallel, so
// nothing else runs), which bounds the memory the request can hold: 139
// MB before the candidates were streamed.
func TestCandidatesMemoryBounded(t *testing.T) {
	srv, pool := invServer(t, Options{MaxAllocationCandidates: -1})
	q := wideTree(t, pool)
	// A first request loads the world's cache (kept between requests,
	// not part of one request's cost).
	require.Equal(t, 200, getBody(t, srv, q+"&limit=1", io.Discard))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var body countingWriter
	require.Equal(t, 200, getBody(t, srv, q, &body))
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("answer %d bytes; allocated %d KB, %d objects", body.n, allocated>>10, after.Mallocs-before.Mallocs)
	require.Greater(t, body.n, int64(150<<20), "the answer has every candidate")
	require.Less(t, allocated, uint64(16<<20), "the request allocated more than 16 MB for a %d MB answer", body.n>>20)
}

// TestCandidatesMax: metalloc-placement's max_allocation_candidates bounds
// the candidates of one request (candidate.DefaultMax by default), before
// limit is applied.
func TestCandidatesMax(t *testing.T) {
	t.Parallel()
	count := func(srv *httptest.Server, path string) int {
		var buf bytes.Buffer
		require.Equal(t, 200, getBody(t, srv, path, &buf))
		return bytes.Count(buf.Bytes(), []byte(`"mappings"`))
	}
	srv, pool := invServer(t)
	q := wideTree(t, pool)
	require.Equal(t, candidate.DefaultMax, count(srv, q))
	srv = serveOn(t, pool, Options{MaxAllocationCandidates: 500})
	require.Equal(t, 500, count(srv, q))
	require.Equal(t, 500, count(srv, q+"&limit=1000"))
	require.Equal(t, 20, count(srv, q+"&limit=20"))
}
