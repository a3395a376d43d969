package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/allocations"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/devstack"
)

// browser starts a headless Chromium (Debian's package, installed by
// scripts/test-deps.sh) with a fresh profile and returns a chromedp context
// for one tab of width x height, stopped at the end of the test.
func browser(t testing.TB, width, height int64) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	require.NoError(t, err, "headless Chromium is needed: run scripts/test-deps.sh (Debian package chromium)")
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("enable-precise-memory-info", true),
		chromedp.WindowSize(int(width), int(height)),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelC(); cancelA() })
	require.NoError(t, chromedp.Do(ctx)) // starts the browser
	return ctx
}

// artifactDir is where a test's screenshots go: $METALLOC_ARTIFACTS/<test>
// when that is set (kept), else a temporary directory (removed).
func artifactDir(t testing.TB) string {
	t.Helper()
	if base := os.Getenv("METALLOC_ARTIFACTS"); base != "" {
		dir := filepath.Join(base, strings.ReplaceAll(t.Name(), "/", "_"))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		return dir
	}
	return t.TempDir()
}

// screenshot saves the whole page as dir/name.png and logs the path.
func screenshot(t testing.TB, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	path := filepath.Join(dir, name+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}

// waitJS evaluates expression in the page every 100 ms until it is true
// (errors, e.g. while a navigation replaces the page, count as false).
func waitJS(t testing.TB, ctx context.Context, timeout time.Duration, what, expression string) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var err error
	for polling := true; polling; {
		var ok bool
		if ok, err = chromedp.Run(ctx, chromedp.Evaluate[bool](expression)); err == nil && ok {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			polling = false
		}
	}
	state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({live: metalloc.live, ready: metalloc.ready, error: document.getElementById('error').textContent, states: metalloc.stateCounts, allocs: metalloc.allocations.map(a => a.uuid + ' ' + a.state)})`))
	t.Fatalf("waiting for %s (%s): last error %v; page: %s", what, expression, err, state)
}

// evalJS evaluates expression in the page and returns its value as T.
func evalJS[T any](t testing.TB, ctx context.Context, expression string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expression))
	require.NoError(t, err, "evaluating %s", expression)
	return v
}

// TestOperatorPage drives the operator page (/ui/) in headless Chromium
// against a real stack with the 240-node sample inventory: every node is
// drawn in its rack, an allocation created through the API shows up and
// moves its node to allocated, a failed one shows its filter funnel, a
// click on a node shows its details, the class filter narrows the grid,
// and the conductors are alive. Screenshots are kept under
// $METALLOC_ARTIFACTS when set.
func TestOperatorPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sample := loadSample(t)
	stack, client := startStack(t, 2)
	enroll(t, ctx, client, sample)
	dir := artifactDir(t)

	bctx := browser(t, 1400, 1000)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(stack.APIURL+"/ui/")))
	waitJS(t, bctx, 30*time.Second, "the fleet", `document.body.dataset.ready === '1'`)

	// 240 nodes, each in the rack its extra says, all drawn.
	fleet := evalJS[struct {
		Nodes  int               `json:"nodes"`
		Drawn  int               `json:"drawn"`
		Header string            `json:"header"`
		Placed map[string]string `json:"placed"`
		Racks  []string          `json:"racks"`
	}](t, bctx, `(() => {
		const f = metalloc.fleet, placed = {};
		f.nodes.uuid.forEach((u, i) => { const r = f.racks[f.nodes.rack[i]]; placed[u] = r.row + '/' + r.rack; });
		return {nodes: f.nodes.uuid.length, drawn: metalloc.layout.drawn, header: document.getElementById('node-count').textContent,
			placed, racks: f.racks.map(r => r.row + '/' + r.rack + ':' + r.free + '/' + r.total)};
	})()`)
	require.Equal(t, 240, fleet.Nodes)
	require.Equal(t, 240, fleet.Drawn)
	require.Equal(t, "240 nodes in 30 racks", fleet.Header)
	require.Len(t, fleet.Racks, 30)
	for _, r := range fleet.Racks {
		require.True(t, strings.HasSuffix(r, ":8/8"), "rack %s: want 8 free of 8", r)
	}
	for _, s := range sample {
		require.Equal(t, fmt.Sprintf("%v/%v", s.Extra["row"], s.Extra["rack"]), fleet.Placed[s.UUID], "node %s", s.Name)
	}
	waitJS(t, bctx, 15*time.Second, "two alive conductors",
		`document.querySelectorAll('#conductors tbody tr .state.alive').length === 2`)
	// The API serves GET /v1/allocations/events: the page follows the
	// stream instead of polling.
	waitJS(t, bctx, 15*time.Second, "the event stream", `metalloc.live === 'sse'`)
	screenshot(t, bctx, dir, "1-fleet")

	// An allocation created through the API appears, goes active, and its
	// node turns allocated in the grid.
	ok, err := allocations.Create(ctx, client, allocations.CreateOpts{Name: "ui-gold", ResourceClass: "baremetal-gold"}).Extract()
	require.NoError(t, err)
	waitJS(t, bctx, 30*time.Second, "the allocation active in the table",
		fmt.Sprintf(`!!document.querySelector('#allocations tr[data-uuid="%s"][data-state="active"]')`, ok.UUID))
	waitJS(t, bctx, 30*time.Second, "its node allocated in the grid", `metalloc.stateCounts.allocated === 1`)
	ok, err = allocations.Get(ctx, client, ok.UUID).Extract()
	require.NoError(t, err)
	require.Equal(t, "72/73", evalJS[string](t, bctx,
		`(() => { const c = metalloc.fleet.class_summary.find(c => c.name === 'baremetal-gold'); return c.free + '/' + c.total })()`))

	// A failed allocation shows why, filter by filter.
	bad, err := allocations.Create(ctx, client, allocations.CreateOpts{
		Name: "ui-impossible", ResourceClass: "baremetal-gold", Traits: []string{"CUSTOM_GPU_A100"},
	}).Extract()
	require.NoError(t, err)
	row := fmt.Sprintf(`#allocations tr[data-uuid="%s"]`, bad.UUID)
	waitJS(t, bctx, 30*time.Second, "the failed allocation's explanation",
		fmt.Sprintf(`!!document.querySelector('%s[data-state="error"] .funnel li.zero')`, row))
	funnel := evalJS[[]string](t, bctx, fmt.Sprintf(`[...document.querySelectorAll('%s .funnel li')].map(li => li.textContent)`, row))
	require.Equal(t, []string{"73of resource class baremetal-gold", "72available", "0with traits CUSTOM_GPU_A100"}, funnel)
	summary := evalJS[string](t, bctx, fmt.Sprintf(`document.querySelector('%s .last-error .summary').textContent`, row))
	require.Equal(t, "no suitable nodes have the requested traits CUSTOM_GPU_A100:", summary, "Ironic's sentence heads the explanation")

	// A click on the allocated node shows its details and allocation.
	at := evalJS[struct {
		X float64 `json:"x"`
		Y float64 `json:"y"`
	}](t, bctx, fmt.Sprintf(`metalloc.cellCenter(metalloc.byUUID.get(%q))`, ok.NodeUUID))
	require.NoError(t, chromedp.Do(bctx, chromedp.MouseClickXY(at.X, at.Y)))
	waitJS(t, bctx, 15*time.Second, "the node's details",
		fmt.Sprintf(`!document.getElementById('details').hidden && document.getElementById('details-body').textContent.includes(%q)`, ok.UUID))
	details := evalJS[string](t, bctx, `document.getElementById('details-body').textContent`)
	require.Contains(t, details, ok.NodeUUID)
	require.Contains(t, details, "baremetal-gold")
	require.Contains(t, details, "active")
	screenshot(t, bctx, dir, "2-allocations-and-details")

	// The class filter leaves the 30 GPU nodes lit.
	evalJS[bool](t, bctx, `(() => { const s = document.getElementById('f-class'); s.value = 'baremetal-gpu'; return s.dispatchEvent(new Event('change')) })()`)
	waitJS(t, bctx, 5*time.Second, "the class filter", `metalloc.matched === 30`)
	screenshot(t, bctx, dir, "3-filter-gpu")
}

// TestOperatorPageEventStream puts the page behind a proxy that adds GET
// /v1/allocations/events as a text/event-stream: the page switches to it
// (no 2 s polling: the safety poll is 30 s), and an allocation created
// through the API appears as soon as an event arrives.
func TestOperatorPageEventStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stack, client := startStack(t, 1)
	enroll(t, ctx, client, loadSample(t)[:8])

	api, err := neturl.Parse(stack.APIURL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(api)
	events, done := make(chan string), make(chan struct{})
	var streams atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/allocations/events" {
			proxy.ServeHTTP(w, r)
			return
		}
		streams.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case id := <-events:
				fmt.Fprintf(w, "event: allocation\ndata: {\"uuid\": %q}\n\n", id)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			case <-done:
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) })

	bctx := browser(t, 1200, 900)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/ui/")))
	waitJS(t, bctx, 30*time.Second, "the fleet", `document.body.dataset.ready === '1' && metalloc.live === 'sse'`)
	require.Equal(t, int32(1), streams.Load())
	require.Equal(t, "live (event stream)", evalJS[string](t, bctx, `document.getElementById('live').textContent`))

	// The page's own clock tells when a 2 s poll would have run: a probe
	// timer due after it (timers fire in the order they are due), and a
	// count of the allocation lists the page fetches from now on. The count
	// starts once no list the page began before (its first, or the one the
	// stream's opening asks for) is still in flight: one answered after the
	// POST below would show the allocation without an event.
	require.True(t, evalJS[bool](t, bctx, `(() => {
		window.__lists = 0;
		const f = window.fetch;
		window.fetch = (u, o) => { if (String(u).includes('/v1/allocations?')) window.__lists++; return f(u, o); };
		return true;
	})()`))
	waitJS(t, bctx, 30*time.Second, "no allocation list in flight", `metalloc.allocIdle()`)
	require.True(t, evalJS[bool](t, bctx, `(() => {
		window.__lists = 0; window.__probe = false;
		setTimeout(() => { window.__probe = true; }, 2500);
		return true;
	})()`))
	a, err := allocations.Create(ctx, client, allocations.CreateOpts{Name: "ui-sse", ResourceClass: "baremetal-gold"}).Extract()
	require.NoError(t, err)
	waitJS(t, bctx, 30*time.Second, "the probe timer, due after a 2 s poll", `window.__probe`)
	require.Zero(t, evalJS[int](t, bctx, `window.__lists`), "the page fetched the allocations without an event: it is polling")
	require.False(t, evalJS[bool](t, bctx, fmt.Sprintf(`!!document.querySelector('#allocations tr[data-uuid="%s"]')`, a.UUID)),
		"the allocation appeared without an event: the page is polling")
	events <- a.UUID
	waitJS(t, bctx, 10*time.Second, "the allocation after its event",
		fmt.Sprintf(`!!document.querySelector('#allocations tr[data-uuid="%s"]')`, a.UUID))
}

// TestOperatorPageHTTPBasic serves the page with api.auth_strategy
// http_basic: without credentials /ui/ and the fleet summary are 401 with a
// Basic challenge (the browser's prompt); a browser that has the user's
// password (here in the URL, as a prompt would give it) loads the page and
// its data.
func TestOperatorPageHTTPBasic(t *testing.T) {
	t.Parallel()
	users := filepath.Join(t.TempDir(), "htpasswd")
	htpasswd(t, users, "operator", "s3cret")
	stack, _ := startStackOpts(t, 1, devstack.Options{Env: []string{
		"METALLOC_API_AUTH_STRATEGY=http_basic", "METALLOC_API_HTTP_BASIC_AUTH_USER_FILE=" + users,
	}})
	for _, path := range []string{"/ui/", "/ui/app.js", "/v1/ui/fleet"} {
		resp, err := http.Get(stack.APIURL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Basic", path)
	}

	u, err := neturl.Parse(stack.APIURL)
	require.NoError(t, err)
	u.User = neturl.UserPassword("operator", "s3cret")
	bctx := browser(t, 1200, 900)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(u.String()+"/ui/")))
	waitJS(t, bctx, 30*time.Second, "the fleet and the conductors",
		`document.body.dataset.ready === '1' && document.querySelectorAll('#conductors tbody tr .state.alive').length === 1`)
	require.Equal(t, "", evalJS[string](t, bctx, `document.getElementById('error').textContent`))
}
