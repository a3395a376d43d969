package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/heapprofiler"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// BenchmarkOperatorPage loads the operator page on fleets of 100,000 and
// 1,000,000 nodes (dbtest.Fleet: rows of 50 racks of 40 nodes)
// in headless Chromium and reports, per load: load-ms (navigation start to
// the grid drawn), fetch-ms and render-ms (GET /v1/ui/fleet; parsing,
// layout and drawing), heap-MB (the page's JavaScript heap after a garbage
// collection), fleet-KB (the summary as transferred, gzip), filter-ms (a
// class filter until its counts are drawn) and zoom-ms (a row, 2,000
// nodes, until drawn). 100,000 nodes show as racks, 1,000,000 as rows.
// Filling the million takes a few minutes. Run it alone:
//
//	bin/metalloc-manage dev exec -- go test ./e2e -run '^$' -bench OperatorPage -benchtime 3x -timeout 60m
func BenchmarkOperatorPage(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchOperatorPage(b, n) })
	}
}

func benchOperatorPage(b *testing.B, n int) {
	ctx := context.Background()
	url := dbtest.NewURL(b)
	pool, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 1})
	require.NoError(b, err)
	dbtest.Fleet(b, pool, n)
	pool.Close()
	stack, err := devstack.Start(ctx, devstack.Options{
		BinDir: binDir, DatabaseURL: url, Conductors: 1, LogDir: b.TempDir(), Log: zaptest.NewLogger(b),
		Env: []string{"METALLOC_LOG_LEVEL=warn"},
	})
	require.NoError(b, err)
	b.Cleanup(func() { stack.Stop(context.Background()) })

	bctx := browser(b, 1400, 1000)
	heap := func(ctx context.Context, t *chromedp.Target) (float64, error) {
		if _, err := cdp.Call(ctx, t, heapprofiler.CollectGarbage, cdp.Empty{}); err != nil {
			return 0, err
		}
		u, err := cdp.Call(ctx, t, cdpruntime.GetHeapUsage, cdp.Empty{})
		return u.UsedSize, err
	}
	type loadStats struct {
		Load   float64            `json:"load"`
		Fetch  float64            `json:"fetch"`
		Render float64            `json:"render"`
		Bytes  float64            `json:"bytes"`
		Nodes  int                `json:"nodes"`
		Mode   string             `json:"mode"`
		Phases map[string]float64 `json:"phases"`
	}
	var sum loadStats
	var heapSum, filterSum, zoomSum float64
	// timed runs action in the page and returns the milliseconds until
	// the summary it asks for is drawn.
	timed := func(tab context.Context, action string) float64 {
		evalJS[bool](b, tab, `(window.benchT0 = performance.now(), window.benchSeen = metalloc.fleet, `+action+`, true)`)
		pollJS(b, tab, 5*time.Minute, "the new summary drawn", `metalloc.fleet !== window.benchSeen`)
		return evalJS[float64](b, tab, `performance.now() - window.benchT0`)
	}
	b.ResetTimer()
	for i := range b.N {
		// A fresh tab each time: a cold page, nothing left of the last one.
		tab, closeTab := chromedp.NewContext(bctx)
		require.NoError(b, chromedp.Do(tab, chromedp.Navigate(stack.APIURL+"/ui/")))
		pollJS(b, tab, 5*time.Minute, "the fleet", `document.body.dataset.ready === '1'`)
		s := evalJS[loadStats](b, tab, `(() => {
			const e = performance.getEntriesByType('resource').find(e => e.name.endsWith('/v1/ui/fleet'));
			return {load: metalloc.firstLoad, fetch: metalloc.fleetTiming.fetchMs, render: metalloc.fleetTiming.renderMs,
				bytes: e ? e.transferSize : 0, nodes: metalloc.fleet.total, mode: metalloc.mode, phases: metalloc.fleetTiming.phases};
		})()`)
		require.Equal(b, n, s.Nodes)
		b.Logf("load %.0f ms (%s): fetch and parse %.0f ms, render %.0f ms %v", s.Load, s.Mode, s.Fetch, s.Render, s.Phases)
		used, err := chromedp.Run(tab, heap)
		require.NoError(b, err)
		filter := timed(tab, `(() => { const s = document.getElementById('f-class'); s.value = 'gpu'; s.dispatchEvent(new Event('change')) })()`)
		zoom := timed(tab, `metalloc.zoomTo('2', null)`)
		require.Equal(b, 2000, evalJS[int](b, tab, `metalloc.layout.drawn`))
		sum.Load += s.Load
		sum.Fetch += s.Fetch
		sum.Render += s.Render
		sum.Bytes += s.Bytes
		heapSum += used
		filterSum += filter
		zoomSum += zoom
		if os.Getenv("METALLOC_ARTIFACTS") != "" && i == b.N-1 {
			screenshot(b, tab, artifactDir(b), fmt.Sprintf("%d-row-2", n))
		}
		closeTab()
	}
	b.StopTimer()
	k := float64(b.N)
	b.ReportMetric(sum.Load/k, "load-ms")
	b.ReportMetric(sum.Fetch/k, "fetch-ms")
	b.ReportMetric(sum.Render/k, "render-ms")
	b.ReportMetric(heapSum/k/1e6, "heap-MB")
	b.ReportMetric(sum.Bytes/k/1e3, "fleet-KB")
	b.ReportMetric(filterSum/k, "filter-ms")
	b.ReportMetric(zoomSum/k, "zoom-ms")
}
