package node_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// BenchmarkFleet serves GET /v1/ui/fleet (the query, the summary, JSON and
// gzip, through the real handler) on fleets of 10,000, 100,000 and
// 1,000,000 nodes (dbtest.Fleet; the 1,000,000 takes a minute or two to
// insert): the page's first request, and a zoom into one rack. It reports
// json-MB (the body before compression) and gzip-MB (as transferred).
//
//	bin/metalloc-manage dev exec -- go test ./node -run '^$' -bench Fleet -benchtime 3x
func BenchmarkFleet(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			pool := dbtest.New(b)
			dbtest.Fleet(b, pool, n)
			e := echo.New()
			e.HTTPErrorHandler = web.IronicErrorHandler
			e.Use(web.RequestID(zap.NewNop()))
			node.NewHandler(node.NewStore(pool), nil, node.HandlerOptions{}).Register(e.Group("/v1", web.IronicVersion()))
			srv := httptest.NewServer(e)
			b.Cleanup(srv.Close)
			// first: the page's first request, each with a filter of its
			// own (an owner no node has), so that every one counts afresh
			// (Store.Fleet shares counts between close requests); rack:
			// a zoom into one rack, the counts shared, its nodes read.
			for _, q := range []struct{ name, query string }{{"first", "?owner=bench-%d"}, {"rack", "?row=2&rack=7"}} {
				b.Run(q.name, func(b *testing.B) {
					var raw, gz, i int
					for b.Loop() {
						i++
						url := srv.URL + "/v1/ui/fleet" + q.query
						if strings.Contains(url, "%d") {
							url = fmt.Sprintf(url, i)
						}
						raw, gz = getFleet(b, url)
					}
					b.ReportMetric(float64(raw)/1e6, "json-MB")
					b.ReportMetric(float64(gz)/1e6, "gzip-MB")
				})
			}
		})
	}
}

// getFleet gets url accepting gzip and returns the body's size before and
// after compression.
func getFleet(b *testing.B, url string) (raw, gz int) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(b, err)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	require.NoError(b, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b, err)
	require.Equal(b, http.StatusOK, resp.StatusCode, string(body))
	zr, err := gzip.NewReader(bytes.NewReader(body))
	require.NoError(b, err)
	n, err := io.Copy(io.Discard, zr)
	require.NoError(b, err)
	return int(n), len(body)
}
