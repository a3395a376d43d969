package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/web"
)

// upgradeFromFile names the commit TestRollingUpgrade upgrades from (its
// first word), with why that one: the oldest commit whose binaries run
// inside the schema compatibility window of a newer schema.
const upgradeFromFile = "testdata/upgrade-from"

// upgradeEnv: a short drain, so that each replacement takes seconds, and
// APIs that announce it on /readyz before they stop accepting (as behind
// a load balancer); conductors hand their rows over within a second.
var upgradeEnv = []string{
	"METALLOC_API_SHUTDOWN_DELAY=1s",
	"METALLOC_API_SHUTDOWN_GRACE=30s",
	"METALLOC_CONDUCTOR_SHUTDOWN_GRACE=2s",
	"METALLOC_CONDUCTOR_HEARTBEAT_INTERVAL=500ms",
}

// TestRollingUpgrade: a cluster at the commit testdata/upgrade-from names
// (built by the test from the repository's history) serves allocations
// through two APIs behind a load balancer that follows their /readyz, with
// three conductors, while clients create allocations at upgradeRate a
// second (Prefer: wait), then delete them. The upgrade then runs as
// docs/operations.md "Upgrading" says: `db sync` (the expand migrations),
// each API replaced by the current build one at a time (the new one
// started, the old one SIGTERMed: readiness 503 first, then it drains),
// each conductor replaced under its hostname (SIGTERM hands its rows
// over), then `db sync --contract`. Every client request must succeed (a
// 503 with Retry-After, retried, is counted), every allocation created
// must be deleted by its client (none lost), no node is ever held twice,
// and the completion rate never stays below half of the rate before the
// upgrade for more than 5 s.
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an earlier commit and runs two clusters' processes")
	}
	ctx := context.Background()
	log := zaptest.NewLogger(t)
	oldBin := buildCommit(t, upgradeFrom(t))

	url := dbtest.NewEmptyURL(t)
	runManage(t, oldBin, url, "db", "sync")
	pool, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 4, ApplicationName: "upgrade-test"})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	dbtest.Nodes(t, pool, 600, "upgrade")

	start := func(bin string, conductors int) *devstack.Stack {
		s, err := devstack.Start(ctx, devstack.Options{
			BinDir: bin, DatabaseURL: url, Conductors: conductors, NoConductors: conductors == 0,
			ConductorPrefix: "up-", LogDir: t.TempDir(), Log: log, Env: upgradeEnv,
		})
		require.NoError(t, err)
		t.Cleanup(func() { s.Stop(context.Background()) })
		return s
	}
	oldA := start(oldBin, 3)
	oldB := start(oldBin, 0)
	balancer := newReadyBalancer(t)
	balancer.add(oldA.APIURL)
	balancer.add(oldB.APIURL)

	load := startUpgradeLoad(t, balancer.URL(), pool)
	phase := func(name string) {
		load.mark(name)
		t.Logf("upgrade: %s (%.1f s)", name, time.Since(load.began).Seconds())
	}
	time.Sleep(6 * time.Second)

	phase("db sync (expand)")
	t.Logf("db sync: %s", runManage(t, binDir, url, "db", "sync"))
	time.Sleep(2 * time.Second)

	for i, old := range []*devstack.Stack{oldA, oldB} {
		phase(fmt.Sprintf("API %d replaced", i+1))
		repl := start(binDir, 0)
		balancer.add(repl.APIURL)
		require.Eventually(t, func() bool { return balancer.ready(repl.APIURL) }, 30*time.Second, 50*time.Millisecond)
		require.NoError(t, old.API.Signal(syscall.SIGTERM))
		require.NoError(t, old.API.Wait(60*time.Second), "the old API drains and exits 0")
		balancer.remove(old.APIURL)
		time.Sleep(2 * time.Second)
	}

	// The conductors, one at a time under their hostnames, as systemd's
	// restart of an upgraded unit does.
	newConductors := start(binDir, 0)
	for _, old := range slices.Clone(oldA.Conductors) {
		phase("conductor " + old.Name + " replaced")
		require.NoError(t, old.Signal(syscall.SIGTERM))
		require.NoError(t, old.Wait(60*time.Second), "the old conductor hands its rows over and exits 0")
		since := time.Now()
		_, err := newConductors.StartConductor(old.Name)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			return queryInt(t, pool, `SELECT count(*) FROM conductors WHERE hostname = $1 AND online AND started_at >= $2`,
				old.Name, since.Add(-time.Second)) == 1
		}, 30*time.Second, 50*time.Millisecond, "%s registers again", old.Name)
		time.Sleep(2 * time.Second)
	}

	phase("db sync --contract")
	t.Logf("db sync --contract: %s", runManage(t, binDir, url, "db", "sync", "--contract"))
	time.Sleep(5 * time.Second)
	phase("end")
	res := load.stop()

	t.Logf("upgrade under load: %d allocations created and deleted in %.1f s; %d retried after a 503 with Retry-After; completions per second before the upgrade (median) %d, lowest after %d; longest spell below half: %d s",
		res.done, res.elapsed.Seconds(), res.retried, res.baseline, res.lowest, res.longestLow)
	t.Logf("completions per second: %v", res.perSecond)
	t.Logf("phases: %s", strings.Join(res.phases, "; "))
	require.Empty(t, res.failures, "failed client requests")
	require.Zero(t, res.lost, "allocations created (201) and gone before their client deleted them")
	require.Zero(t, res.doubleHeld, "samples that found a node held twice")
	require.LessOrEqual(t, res.longestLow, 5, "seconds in a row below half the rate before the upgrade")
	checkInvariants(t, pool)
}

// upgradeFrom is the commit testdata/upgrade-from names.
func upgradeFrom(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(upgradeFromFile)
	require.NoError(t, err)
	fields := strings.Fields(string(raw))
	require.NotEmpty(t, fields, "%s names no commit", upgradeFromFile)
	return fields[0]
}

// buildCommit builds metalloc-api, -conductor and -manage of commit (from
// the repository's history: git archive, then go build) into a directory
// of the test's, which it returns.
func buildCommit(t *testing.T, commit string) string {
	t.Helper()
	root := repoRoot()
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("the rolling-upgrade test builds commit %s, which this clone lacks (a shallow clone? fetch the history): %v %s", commit, err, out)
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("extracting %s: %v %s", commit, err, out)
	}
	bin := t.TempDir()
	began := time.Now()
	for _, c := range []string{"api", "conductor", "manage"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, "metalloc-"+c), "./cmd/"+c)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building metalloc-%s at %s: %v\n%s", c, commit, err, out)
		}
	}
	t.Logf("built %s's binaries in %.1f s", commit, time.Since(began).Seconds())
	return bin
}

// runManage runs bin's metalloc-manage with args on the database at url,
// fails the test when it exits non-zero, and returns its output.
func runManage(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "metalloc-manage"), args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "metalloc-manage %s:\n%s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

// readyBalancer is the load balancer in front of the APIs: round robin
// over the backends whose /readyz answered 200 at its last probe (every
// 50 ms), as HAProxy's or a cloud balancer's health check does; with none
// ready it answers 503 with Retry-After, which the clients retry.
type readyBalancer struct {
	t   *testing.T
	srv *httptest.Server
	mu  sync.Mutex
	bes []*balancerBackend
	rr  atomic.Uint64
}

type balancerBackend struct {
	url   string
	proxy *httputil.ReverseProxy
	ready atomic.Bool
	stop  chan struct{}
}

func newReadyBalancer(t *testing.T) *readyBalancer {
	b := &readyBalancer{t: t}
	b.srv = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(func() {
		b.mu.Lock()
		for _, be := range b.bes {
			close(be.stop)
		}
		b.bes = nil
		b.mu.Unlock()
		b.srv.Close()
	})
	return b
}

func (b *readyBalancer) URL() string { return b.srv.URL }

func (b *readyBalancer) add(raw string) {
	u, err := url.Parse(raw)
	require.NoError(b.t, err)
	be := &balancerBackend{url: raw, proxy: httputil.NewSingleHostReverseProxy(u), stop: make(chan struct{})}
	be.proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		// A backend that failed a request it was given: the client sees a
		// 502, a failure the test counts.
		http.Error(w, "balancer: "+err.Error(), http.StatusBadGateway)
	}
	go be.probe()
	b.mu.Lock()
	b.bes = append(b.bes, be)
	b.mu.Unlock()
}

func (b *readyBalancer) remove(raw string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bes = slices.DeleteFunc(b.bes, func(be *balancerBackend) bool {
		if be.url == raw {
			close(be.stop)
			return true
		}
		return false
	})
}

func (b *readyBalancer) ready(raw string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, be := range b.bes {
		if be.url == raw {
			return be.ready.Load()
		}
	}
	return false
}

func (be *balancerBackend) probe() {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(be.url + "/readyz")
		ok := err == nil && resp.StatusCode == http.StatusOK
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		be.ready.Store(ok)
		select {
		case <-be.stop:
			return
		case <-tick.C:
		}
	}
}

func (b *readyBalancer) serve(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	var ready []*balancerBackend
	for _, be := range b.bes {
		if be.ready.Load() {
			ready = append(ready, be)
		}
	}
	b.mu.Unlock()
	if len(ready) == 0 {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "balancer: no API is ready", http.StatusServiceUnavailable)
		return
	}
	ready[b.rr.Add(1)%uint64(len(ready))].proxy.ServeHTTP(w, r)
}

// upgradeRate is the allocations a second the clients start.
const upgradeRate = 200

// upgradeLoad is the clients' load during the upgrade and what it saw.
type upgradeLoad struct {
	t       *testing.T
	base    string
	client  *http.Client
	began   time.Time
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	done    []int // completions per second since began
	fails   []string
	phases  []string
	retried atomic.Int64
	lost    atomic.Int64
	double  atomic.Int64
	next    atomic.Int64
}

// upgradeResult is what the load saw.
type upgradeResult struct {
	done, retried, lost, doubleHeld int64
	elapsed                         time.Duration
	failures, phases                []string
	perSecond                       []int
	baseline, lowest, longestLow    int
}

// startUpgradeLoad starts clients that begin upgradeRate allocations a
// second through the API at base (each: POST with Prefer: wait, then
// DELETE), and a sampler of the database that counts nodes held twice.
func startUpgradeLoad(t *testing.T, base string, pool *pgxpool.Pool) *upgradeLoad {
	// ctx ends the starts and the sampler; the allocations under way run
	// to their end (their requests have the client's timeout).
	ctx, cancel := context.WithCancel(context.Background())
	l := &upgradeLoad{t: t, base: base, began: time.Now(), cancel: cancel,
		client: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(time.Second / upgradeRate)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l.wg.Add(1)
			go func() { defer l.wg.Done(); l.one(context.Background()) }()
		}
	}()
	go func() {
		defer l.wg.Done()
		for ctx.Err() == nil {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT node_id FROM allocations WHERE node_id IS NOT NULL
			                       GROUP BY node_id HAVING count(*) > 1) d`).Scan(&n)
			if err == nil && n > 0 {
				l.double.Add(1)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return l
}

func (l *upgradeLoad) mark(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phases = append(l.phases, fmt.Sprintf("%.1fs %s", time.Since(l.began).Seconds(), name))
}

func (l *upgradeLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.fails) < 50 {
		l.fails = append(l.fails, fmt.Sprintf("%.1fs ", time.Since(l.began).Seconds())+fmt.Sprintf(format, args...))
	}
}

// one creates an allocation, waits for it to be active and deletes it.
func (l *upgradeLoad) one(ctx context.Context) {
	name := "up-" + strconv.FormatInt(l.next.Add(1), 10)
	body := `{"resource_class":"upgrade","name":"` + name + `"}`
	status, doc, ok := l.do(ctx, "POST", "/v1/allocations", body, name)
	if !ok {
		return
	}
	if status == http.StatusConflict {
		// A retried POST whose first try was stored: it is ours.
		status, doc, ok = l.do(ctx, "GET", "/v1/allocations/"+name, "", name)
		if !ok {
			return
		}
	}
	for status/100 == 2 && doc["state"] == "allocating" {
		status, doc, ok = l.do(ctx, "GET", "/v1/allocations/"+name, "", name)
		if !ok {
			return
		}
	}
	if status/100 != 2 || doc["state"] != "active" {
		l.fail("%s: %d, state %v, last_error %v", name, status, doc["state"], doc["last_error"])
		return
	}
	status, _, ok = l.do(ctx, "DELETE", "/v1/allocations/"+name, "", name)
	switch {
	case !ok:
	case status == http.StatusNotFound:
		l.lost.Add(1)
	case status != http.StatusNoContent:
		l.fail("DELETE %s: %d", name, status)
	default:
		sec := int(time.Since(l.began) / time.Second)
		l.mu.Lock()
		for len(l.done) <= sec {
			l.done = append(l.done, 0)
		}
		l.done[sec]++
		l.mu.Unlock()
	}
}

// do sends one request through the balancer, retrying a 503 that carries
// Retry-After (counted); other 5xx and transport errors are failures
// (ok false). A 404 or 409 is returned for the caller to judge.
func (l *upgradeLoad) do(ctx context.Context, method, path, body, name string) (int, map[string]any, bool) {
	for {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, l.base+path, rd)
		require.NoError(l.t, err)
		req.Header.Set(web.IronicVersionHeader, "1.82")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if method != "DELETE" {
			req.Header.Set("Prefer", "wait=30")
		}
		resp, err := l.client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				l.fail("%s %s (%s): %v", method, path, name, err)
			}
			return 0, nil, false
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
			l.retried.Add(1)
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			select {
			case <-ctx.Done():
				return 0, nil, false
			case <-time.After(min(time.Duration(wait)*time.Second, time.Second)):
			}
			continue
		}
		if resp.StatusCode >= 500 {
			l.fail("%s %s (%s): %d %s", method, path, name, resp.StatusCode, strings.TrimSpace(string(raw)))
			return 0, nil, false
		}
		var doc map[string]any
		_ = json.Unmarshal(raw, &doc)
		return resp.StatusCode, doc, true
	}
}

// stop ends the load: no new allocation starts, those under way finish
// (created, waited for and deleted).
func (l *upgradeLoad) stop() upgradeResult {
	elapsed := time.Since(l.began)
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	res := upgradeResult{retried: l.retried.Load(), lost: l.lost.Load(), doubleHeld: l.double.Load(),
		elapsed: elapsed, failures: l.fails, phases: l.phases, perSecond: l.done}
	for _, n := range l.done {
		res.done += int64(n)
	}
	// The rate before the upgrade: the median of seconds 1-5 (second 0
	// ramps up). Then the longest spell below half of it, over the
	// seconds after, but the last (cut short by the stop).
	if len(l.done) > 7 {
		before := slices.Clone(l.done[1:6])
		slices.Sort(before)
		res.baseline = before[len(before)/2]
		res.lowest = res.baseline
		run := 0
		for _, n := range l.done[6 : len(l.done)-1] {
			res.lowest = min(res.lowest, n)
			if 2*n < res.baseline {
				run++
				res.longestLow = max(res.longestLow, run)
			} else {
				run = 0
			}
		}
	}
	return res
}
