package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// pollJS waits (chromedp.Poll, every 100 ms) until expression is truthy
// in the page, failing the test with the page's state after timeout.
func pollJS(t testing.TB, ctx context.Context, timeout time.Duration, what, expression string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expression,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({ready: window.metalloc && metalloc.ready,
			mode: window.metalloc && metalloc.mode, error: document.getElementById('error').textContent,
			states: window.metalloc && metalloc.stateCounts, zoom: window.metalloc && metalloc.zoom,
			racks: window.metalloc && metalloc.fleet && metalloc.fleet.racks && metalloc.fleet.racks.length,
			drawn: window.metalloc && metalloc.layout && metalloc.layout.drawn,
			timing: window.metalloc && metalloc.fleetTiming})`))
		t.Fatalf("waiting for %s (%s): %v; page: %s", what, expression, err, state)
	}
}

// openPage opens the operator page of apiURL in a fresh headless Chromium
// of width x height whose clock is in time zone tz, and waits for the
// fleet.
func openPage(t *testing.T, apiURL, tz string, width, height int64) context.Context {
	t.Helper()
	bctx := browser(t, width, height)
	_, err := chromedp.Run(bctx, func(ctx context.Context, tg *chromedp.Target) (cdp.Empty, error) {
		return cdp.Call(ctx, tg, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: tz})
	})
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(apiURL+"/ui/")))
	pollJS(t, bctx, 60*time.Second, "the fleet", `document.body.dataset.ready === '1'`)
	return bctx
}

// TestOperatorPageFixes drives the operator page in headless Chromium
// (time zone Asia/Kolkata, UTC+05:30) on the 240 sample nodes with three
// conductors and checks each defect of issue 25 fixed: allocation groups
// shown (a failed one with its last_error, an active one with its member
// nodes) and their members marked in the allocations; free/total bars
// filled with the free share; class names whole; times with date, 24
// hours and UTC offset; the grid filling its panel; a conductor stopped
// cleanly shown stopped and a killed one dead, as metalloc_conductors_dead
// counts them.
func TestOperatorPageFixes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stack, client := startStackOpts(t, 3, devstack.Options{Env: []string{
		"METALLOC_CONDUCTOR_HEARTBEAT_INTERVAL=1s", "METALLOC_CONDUCTOR_HEARTBEAT_TIMEOUT=15s"}})
	enroll(t, ctx, client, loadSample(t))
	dir := artifactDir(t)

	// A group that fits, one that cannot, and a plain allocation.
	group := func(name string, count int) map[string]any {
		var doc map[string]any
		_, err := client.Post(ctx, client.ServiceURL("allocation_groups"),
			map[string]any{"name": name, "count": count, "resource_class": "baremetal-gpu"}, &doc,
			&gophercloud.RequestOpts{OkCodes: []int{201}})
		require.NoError(t, err)
		return doc
	}
	train, huge := group("ui-train", 3), group("ui-huge", 400)
	_, err := client.Post(ctx, client.ServiceURL("allocations"), map[string]any{"resource_class": "baremetal-storage", "name": "ui-one"}, nil,
		&gophercloud.RequestOpts{OkCodes: []int{201}})
	require.NoError(t, err)

	bctx := openPage(t, stack.APIURL, "Asia/Kolkata", 1400, 1000)
	// Each fix is a subtest of its own on the one page, so that each
	// reports alone (all failed before the fixes).
	trainRow, hugeRow := fmt.Sprintf(`#groups tr[data-uuid="%s"]`, train["uuid"]), fmt.Sprintf(`#groups tr[data-uuid="%s"]`, huge["uuid"])
	t.Run("groups shown and members marked", func(t *testing.T) {
		pollJS(t, bctx, 60*time.Second, "both groups in the table",
			fmt.Sprintf(`!!document.querySelector('%s[data-state="active"]') && !!document.querySelector('%s[data-state="error"] .last-error')`, trainRow, hugeRow))
		require.Contains(t, evalJS[string](t, bctx, fmt.Sprintf(`document.querySelector('%s').textContent`, hugeRow)),
			"not enough free nodes of baremetal-gpu: 400 wanted")
		require.Regexp(t, `^3 of 3: \S+, \S+, \S+$`, evalJS[string](t, bctx, fmt.Sprintf(`document.querySelector('%s .members').textContent`, trainRow)))
		require.Equal(t, "error", evalJS[string](t, bctx, `document.querySelector('#groups tbody tr').dataset.state`), "failed groups come first")
		// Its three members are marked in the allocations, with the group's name.
		pollJS(t, bctx, 30*time.Second, "the members marked",
			fmt.Sprintf(`document.querySelectorAll('#allocations tr[data-group="%s"] .group-mark').length === 3`, train["uuid"]))
		require.Equal(t, []string{"ui-train", "ui-train", "ui-train"}, evalJS[[]string](t, bctx,
			fmt.Sprintf(`[...document.querySelectorAll('#allocations tr[data-group="%s"] .group-mark')].map(e => e.textContent)`, train["uuid"])))
	})
	pollJS(t, bctx, 30*time.Second, "the grid with the group's and the allocation's nodes", `metalloc.stateCounts.allocated === 4`)

	// Bars: the filled part is the free share (gpu 27 free of 30); the
	// labels are the whole class names.
	type barDoc struct {
		Label string  `json:"label"`
		Free  float64 `json:"free"`
		Total float64 `json:"total"`
		Fill  float64 `json:"fill"`
		Cut   bool    `json:"cut"`
	}
	bars := func(t *testing.T) []barDoc {
		return evalJS[[]barDoc](t, bctx, `[...document.querySelectorAll('#class-bars .bar')].map(b => {
		const l = b.querySelector('.label'), f = b.querySelector('.free') || b.querySelector('.used');
		const [free, total] = b.querySelector('.num').textContent.replace(/,/g, '').split(' / ').map(Number);
		return {label: l.textContent, free, total,
			fill: f.getBoundingClientRect().width / b.querySelector('.track').getBoundingClientRect().width,
			cut: l.scrollWidth > l.clientWidth + 1 || getComputedStyle(l).textOverflow === 'ellipsis'};
	})`)
	}
	t.Run("bars fill the free share", func(t *testing.T) {
		got := bars(t)
		require.Len(t, got, 4)
		for _, b := range got {
			require.InDelta(t, b.Free/b.Total, b.Fill, 0.02, "bar %s fills its free share", b.Label)
		}
	})
	t.Run("class names whole", func(t *testing.T) {
		labels := map[string]float64{}
		for _, b := range bars(t) {
			labels[b.Label] = b.Free
			require.False(t, b.Cut, "class name %s is shown whole", b.Label)
		}
		require.Equal(t, map[string]float64{"baremetal-gold": 73, "baremetal-gpu": 27, "baremetal-silver": 115, "baremetal-storage": 21}, labels)
		require.Equal(t, 0, evalJS[int](t, bctx, `[...document.querySelectorAll('td.class')].filter(td => td.scrollWidth > td.clientWidth + 1).length`))
	})
	// Times: date, 24-hour clock, UTC offset, in the browser's zone.
	t.Run("times with date and offset", func(t *testing.T) {
		var created string
		for _, a := range evalJS[[]map[string]any](t, bctx, `metalloc.allocations`) {
			if a["name"] == "ui-one" {
				created = a["created_at"].(string)
			}
		}
		at, err := time.Parse(time.RFC3339Nano, created)
		require.NoError(t, err)
		want := at.In(time.FixedZone("IST", 5*3600+1800)).Format("2006-01-02 15:04:05 -07:00")
		require.Contains(t, evalJS[[]string](t, bctx, `[...document.querySelectorAll('#allocations td.time')].map(td => td.textContent)`), want)
		stamp := regexp.MustCompile(`\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \+05:30$`)
		require.Regexp(t, stamp, evalJS[string](t, bctx, `document.getElementById('updated').textContent`))
		require.Regexp(t, stamp, evalJS[string](t, bctx, fmt.Sprintf(`document.querySelector('%s td.time').textContent`, trainRow)))
	})

	// The grid fills its panel: 90% of the width, 80% of the height.
	t.Run("grid fills its panel", func(t *testing.T) {
		fill := evalJS[struct {
			Mode   string  `json:"mode"`
			Drawn  int     `json:"drawn"`
			Across float64 `json:"across"`
			Down   float64 `json:"down"`
		}](t, bctx, `(() => {
		const L = metalloc.layout, wrap = document.getElementById('grid-wrap'), sec = document.getElementById('fleet-section').getBoundingClientRect();
		const top = document.getElementById('grid').getBoundingClientRect().top;
		return {mode: metalloc.mode, drawn: L.drawn, across: L.used / wrap.clientWidth, down: (top + L.height - sec.top) / sec.height};
	})()`)
		require.Equal(t, "nodes", fill.Mode)
		require.Equal(t, 240, fill.Drawn)
		require.Greater(t, fill.Across, 0.9, "share of the panel's width the grid uses")
		require.Greater(t, fill.Down, 0.8, "share of the panel's height the grid uses")
		require.LessOrEqual(t, fill.Down, 1.0)
	})
	screenshot(t, bctx, dir, "1-groups-bars-times")

	// Conductors: one stopped cleanly, one killed (dead once its 15 s
	// heartbeat timeout passes), one alive; the metric agrees.
	t.Run("stopped apart from dead", func(t *testing.T) {
		stopped, killed := stack.Conductors[0], stack.Conductors[1]
		require.NoError(t, stopped.Signal(syscall.SIGTERM))
		require.NoError(t, stopped.Wait(30*time.Second))
		require.NoError(t, killed.Signal(syscall.SIGKILL))
		_ = killed.Wait(10 * time.Second)
		pollJS(t, bctx, 60*time.Second, "one conductor of each state", fmt.Sprintf(`(() => {
		const s = h => (document.querySelector('#conductors tr[data-hostname="' + h + '"]') || {dataset: {}}).dataset.state;
		return s(%q) === 'stopped' && s(%q) === 'dead' && s(%q) === 'alive';
	})()`, stopped.Name, killed.Name, stack.Conductors[2].Name))
		require.Equal(t, 1.0, scrapeGauge(t, stack.APIURL, "metalloc_conductors_dead"))
		require.Regexp(t, `^since \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \+05:30$`, evalJS[string](t, bctx,
			fmt.Sprintf(`document.querySelector('#conductors tr[data-hostname="%s"] td:last-child').textContent`, stopped.Name)))
	})
	screenshot(t, bctx, dir, "2-conductors")
}

// scrapeGauge reads an unlabelled gauge from apiURL's /metrics.
func scrapeGauge(t *testing.T, apiURL, name string) float64 {
	t.Helper()
	resp, err := http.Get(apiURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(raw)
	require.NotNil(t, m, "%s not in /metrics", name)
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return v
}

// TestOperatorPageAggregates: with more nodes than the page draws (25,000
// over 625 racks) it shows one tile per rack, split by state, and draws a
// rack's nodes once zoomed into it; with more racks than it tiles (every
// node a rack of its own) it shows one bar per row and a row's racks once
// zoomed into it. The fleet summary carries no node columns at the top.
func TestOperatorPageAggregates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t)
	stack, _ := startStackOpts(t, 1, devstack.Options{DatabaseURL: url})
	pool, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	dbtest.Fleet(t, pool, 25_000)
	dir := artifactDir(t)

	bctx := openPage(t, stack.APIURL, "UTC", 1400, 1000)
	top := evalJS[struct {
		Mode   string `json:"mode"`
		Drawn  int    `json:"drawn"`
		Nodes  bool   `json:"nodes"`
		Header string `json:"header"`
		Zoom   string `json:"zoom"`
		Bytes  int    `json:"bytes"`
	}](t, bctx, `(() => {
		const e = performance.getEntriesByType('resource').find(e => e.name.endsWith('/v1/ui/fleet'));
		return {mode: metalloc.mode, drawn: metalloc.layout.drawn, nodes: metalloc.fleet.nodes !== null,
			header: document.getElementById('node-count').textContent, zoom: document.getElementById('zoom').textContent,
			bytes: e ? e.encodedBodySize : -1};
	})()`)
	require.Equal(t, "racks", top.Mode)
	require.Equal(t, 625, top.Drawn, "one tile per rack, all in view")
	require.False(t, top.Nodes)
	require.Equal(t, "25,000 nodes in 625 racks", top.Header)
	require.Contains(t, top.Zoom, "racks summarised")
	require.Less(t, top.Bytes, 100_000, "the summary without nodes is small")
	screenshot(t, bctx, dir, "1-racks")

	// A click on a rack's tile draws its nodes.
	at := evalJS[struct{ X, Y float64 }](t, bctx, `(() => {
		const L = metalloc.layout, k = metalloc.fleet.racks.findIndex(r => r.row === '3' && r.rack === '7'), it = L.items[k];
		const b = document.getElementById('grid').getBoundingClientRect();
		return {X: b.left + it.x + it.w / 2, Y: b.top + it.y - L.top + it.h / 2};
	})()`)
	require.NoError(t, chromedp.Do(bctx, chromedp.MouseClickXY(at.X, at.Y)))
	pollJS(t, bctx, 2*time.Minute, "rack 3/7's nodes", `metalloc.mode === 'nodes' && metalloc.zoom.rack === '7' && metalloc.layout.drawn === 40`)
	require.Equal(t, "3", evalJS[string](t, bctx, `metalloc.zoom.row`))
	require.True(t, strings.HasPrefix(evalJS[string](t, bctx, `document.getElementById('zoom').textContent`), "whole fleet › row 3 › rack 7"))
	screenshot(t, bctx, dir, "2-rack")

	// Every node a rack of its own: rows, then a row's racks.
	_, err = pool.Exec(ctx, `UPDATE nodes SET extra = jsonb_build_object('row', 1 + id % 4, 'rack', id)`)
	require.NoError(t, err)
	evalJS[bool](t, bctx, `(metalloc.zoomTo(null, null), true)`)
	pollJS(t, bctx, 2*time.Minute, "the rows", `metalloc.mode === 'rows' && metalloc.layout.drawn === 4`)
	require.Equal(t, "25,000 nodes in 25,000 racks", evalJS[string](t, bctx, `document.getElementById('node-count').textContent`))
	screenshot(t, bctx, dir, "3-rows")
	// Row 2 holds the nodes whose id is 1 modulo 4: a quarter of them when
	// the ids run without gaps, which the sequence does not promise.
	var inRow2 int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM nodes WHERE id % 4 = 1`).Scan(&inRow2))
	evalJS[bool](t, bctx, `(metalloc.zoomTo('2', null), true)`)
	pollJS(t, bctx, 2*time.Minute, "row 2's racks", fmt.Sprintf(
		`metalloc.zoom.row === '2' && metalloc.mode === 'nodes' && metalloc.fleet.racks.length === %d`, inRow2))
}
