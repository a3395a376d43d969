package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/internal/patroni"
)

// Shape of the Patroni failover test.
const (
	patroniNodes   = 5000                   // available nodes enrolled
	patroniRate    = 200                    // allocations per second the clients aim at
	patroniClients = 64                     // concurrent clients
	patroniKeep    = 10                     // every patroniKeep-th allocation is kept, the rest deleted
	patroniWarmup  = 400                    // allocations created before the first kill
	patroniAfter   = 400                    // allocations created after each recovery before going on
	patroniWait    = 90 * time.Second       // bound on each wait for the cluster
	patroniRequest = 20 * time.Second       // a request not answered within this hangs
	patroniSettle  = 60 * time.Second       // every kept allocation leaves allocating within this
	patroniRetry   = 250 * time.Millisecond // a DELETE's pause after a 503 without Retry-After
)

// TestPatroniFailover: PostgreSQL under Patroni (three etcd members,
// three PostgreSQL members in synchronous mode, package internal/patroni),
// the API and two conductors on the members' multi-host URL with
// target_session_attrs=read-write, and clients creating (Prefer: wait)
// then deleting allocations at 200/s. The primary's host is killed
// (SIGKILL of its Patroni and its PostgreSQL); the test does nothing else:
// Patroni must promote the synchronous standby by itself. Clients see
// 503s with Retry-After meanwhile, never a 500, a transport error or a
// hang; every allocation that got its 201 survives (kept ones end active
// on a node of their own, the others' DELETE finds them) and no node is
// held twice. The killed member's Patroni is then started again: it
// rejoins as a standby (pg_rewind) and streams, and the new primary is
// killed the same way: the second failover must work as the first.
// Figures per failover: kill to promotion, kill to the first 201, 503s.
func TestPatroniFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and Patroni")
	}
	ctx := context.Background()
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	ha, err := patroni.Start(ctx, patroni.Options{Members: 3, LogDir: t.TempDir(), Log: log})
	require.NoError(t, err)
	t.Cleanup(ha.Stop)
	url := ha.URL("metalloc")
	_, err = db.Migrate(ctx, url, zap.NewNop())
	require.NoError(t, err)
	seed, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	dbtest.Nodes(t, seed, patroniNodes, "ha")
	seed.Close()

	stack := failoverStack(t, url, log)

	load := startHALoad(stack.APIURL)
	defer load.halt()
	load.waitCreated(t, patroniWarmup, time.Time{})

	type failover struct {
		from, to          string
		promoted, success time.Duration
		answered          time.Duration // to the first 2xx (a DELETE needs no conductor)
		unavailable       int
		slowest           time.Duration // the slowest 503
		rate              float64       // allocations created per second in the 5 s before the kill
	}
	var figures []failover
	for round := range 2 {
		old := ha.Primary(ctx)
		require.NotNil(t, old, "a primary before failover %d", round+1)
		killedAt := time.Now()
		rate := load.createdBetween(killedAt.Add(-5*time.Second), killedAt) / 5
		require.NoError(t, ha.Kill(old))
		killDone := time.Now()
		// Nobody acts: Patroni's leader key expires (ttl) and the
		// synchronous standby takes it.
		promoted, err := ha.WaitPrimary(ctx, old, patroniWait)
		require.NoError(t, err)
		promotedAt := time.Now()
		recoveredAt, answeredAt := load.waitRecovered(t, killedAt, killDone)
		load.waitCreated(t, patroniAfter, recoveredAt)
		n503, slowest := load.unavailableSince(killedAt)
		figures = append(figures, failover{from: old.Name, to: promoted.Name, rate: rate,
			promoted: promotedAt.Sub(killedAt), success: recoveredAt.Sub(killedAt), answered: answeredAt.Sub(killedAt),
			unavailable: n503, slowest: slowest})
		if round == 1 {
			break
		}
		// The old primary's host comes back: its Patroni rewinds it and
		// it follows the new primary.
		require.NoError(t, ha.Restart(old))
		require.NoError(t, ha.WaitSynchronous(ctx, 2*patroniWait))
		states, err := ha.State(ctx)
		require.NoError(t, err)
		rejoined := false
		for _, s := range states {
			if s.Name == old.Name {
				rejoined = s.Role == "sync_standby" || s.Role == "replica"
			}
		}
		require.True(t, rejoined, "%s back as a standby: %+v", old.Name, states)
		raw, _ := os.ReadFile(old.LogPath)
		t.Logf("%s rejoined as a standby (pg_rewind ran: %v): %+v", old.Name,
			strings.Contains(string(raw), "pg_rewind exit code=0"), states)
	}
	load.halt()

	// What the clients saw: 201, 204, 503 with Retry-After; a 404 only for
	// a DELETE retried after a 503 (the first attempt may have committed).
	statuses := map[string]int{}
	var kept []string
	ambiguous := 0
	for _, r := range load.all() {
		statuses[r.method+" "+strconv.Itoa(r.status)]++
		switch {
		case r.method == http.MethodPost && r.status == http.StatusCreated:
			if r.kept {
				kept = append(kept, r.uuid)
			}
		case r.method == http.MethodDelete && r.status == http.StatusNoContent:
		case r.status == http.StatusServiceUnavailable:
			if r.retryAfter == "" {
				t.Errorf("%s at %s: 503 without Retry-After", r.method, r.start.Format(time.StampMilli))
			}
		case r.method == http.MethodDelete && r.status == http.StatusNotFound && r.retried:
			ambiguous++
		default:
			t.Errorf("%s %s at %s: status %d, %q", r.method, r.uuid, r.start.Format(time.StampMilli), r.status, r.err)
		}
	}

	pool, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	dbtest.WaitFor(t, patroniSettle, "every allocation to leave allocating", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
	})
	lost := 0
	for _, u := range kept {
		if dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE uuid = $1 AND state = 'active'`, u) != 1 {
			lost++
		}
	}
	require.Zero(t, lost, "kept allocations lost or not active after the failovers")
	require.Empty(t, dbtest.Broken(t, pool), "invariants after the failovers")
	doubleHeld := dbtest.Count(t, pool, `SELECT count(*) FROM (SELECT node_id FROM allocations
		WHERE node_id IS NOT NULL GROUP BY node_id HAVING count(*) > 1) d`)
	require.Zero(t, doubleHeld, "nodes held by two allocations")

	keys := make([]string, 0, len(statuses))
	for k := range statuses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var counts []string
	for _, k := range keys {
		counts = append(counts, k+": "+strconv.Itoa(statuses[k]))
	}
	for i, f := range figures {
		t.Logf("failover %d (%s -> %s) at %.0f allocations/s: promoted by Patroni %s after the kill, "+
			"first 2xx %s, first 201 %s after the kill, 503s %d (slowest %s)",
			i+1, f.from, f.to, f.rate, f.promoted.Round(time.Millisecond), f.answered.Round(time.Millisecond),
			f.success.Round(time.Millisecond), f.unavailable, f.slowest.Round(time.Millisecond))
	}
	t.Logf("requests: %s; kept %d (lost %d), DELETEs 404 after a 503 %d, double-held %d",
		strings.Join(counts, ", "), len(kept), lost, ambiguous, doubleHeld)
}

// haRequest is one request of haLoad.
type haRequest struct {
	method     string
	start, end time.Time
	status     int // 0: no answer (a transport error or a timeout)
	uuid       string
	kept       bool   // a created allocation the clients do not delete
	retried    bool   // a DELETE sent again after a 503
	retryAfter string // a 503's Retry-After
	err        string // the body of an unexpected answer, or the transport error
}

// haLoad is clients creating allocations of class "ha" with Prefer: wait
// at patroniRate per second and deleting them (all but every
// patroniKeep-th), a DELETE answered 503 sent again after its Retry-After.
// A POST answered 503 is not sent again: the next one is the retry.
type haLoad struct {
	api     string
	client  *http.Client
	tokens  chan struct{}
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
	n       atomic.Int64

	mu   sync.Mutex
	reqs []haRequest
}

func startHALoad(api string) *haLoad {
	l := &haLoad{api: api, client: &http.Client{Timeout: patroniRequest},
		tokens: make(chan struct{}), stop: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(time.Second / patroniRate)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
				select { // no client free: the tick is lost, the rate stays bounded
				case l.tokens <- struct{}{}:
				default:
				}
			}
		}
	}()
	for range patroniClients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				case <-l.tokens:
				}
				l.cycle()
			}
		}()
	}
	return l
}

// cycle creates one allocation and, unless it is kept, deletes it.
func (l *haLoad) cycle() {
	r := l.send(http.MethodPost, "/v1/allocations", []byte(`{"resource_class": "ha"}`))
	if r.status == http.StatusCreated {
		r.kept = l.n.Add(1)%patroniKeep == 0
	}
	l.record(r)
	if r.status != http.StatusCreated || r.kept {
		return
	}
	for retried := false; ; retried = true {
		d := l.send(http.MethodDelete, "/v1/allocations/"+r.uuid, nil)
		d.uuid, d.retried = r.uuid, retried
		l.record(d)
		if d.status != http.StatusServiceUnavailable {
			return
		}
		pause := patroniRetry
		if s, err := strconv.Atoi(d.retryAfter); err == nil {
			pause = time.Duration(s) * time.Second
		}
		time.Sleep(pause)
	}
}

func (l *haLoad) send(method, path string, body []byte) haRequest {
	r := haRequest{method: method, start: time.Now()}
	req, _ := http.NewRequest(method, l.api+path, bytes.NewReader(body))
	req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Prefer", "wait=10")
	}
	resp, err := l.client.Do(req)
	r.end = time.Now()
	if err != nil {
		r.err = err.Error()
		return r
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r.status, r.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	switch resp.StatusCode {
	case http.StatusCreated:
		var doc struct{ UUID string }
		_ = json.Unmarshal(raw, &doc)
		r.uuid = doc.UUID
	case http.StatusNoContent, http.StatusServiceUnavailable:
	default:
		r.err = string(raw)
	}
	return r
}

func (l *haLoad) record(r haRequest) {
	l.mu.Lock()
	l.reqs = append(l.reqs, r)
	l.mu.Unlock()
}

func (l *haLoad) all() []haRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]haRequest(nil), l.reqs...)
}

// halt stops the clients and waits for them (a DELETE being retried is
// sent until it is answered otherwise than 503).
func (l *haLoad) halt() {
	l.stopped.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// waitCreated waits until n allocations were created by POSTs sent after
// since.
func (l *haLoad) waitCreated(t *testing.T, n int, since time.Time) {
	t.Helper()
	dbtest.WaitFor(t, patroniWait, strconv.Itoa(n)+" allocations created", func() bool {
		c := 0
		for _, r := range l.all() {
			if r.method == http.MethodPost && r.status == http.StatusCreated && r.start.After(since) {
				c++
			}
		}
		return c >= n
	})
}

// waitRecovered waits for the first 201 after the outage that began at
// killedAt and returns its time, and the time of the first 2xx: answers to
// requests sent after the first failed request sent after the kill and
// after killDone, when the last of the old primary's processes was gone
// (until then a backend not yet killed may still commit, and replicate,
// a request sent after the first failure). A 201 with Prefer: wait needs
// a conductor to have allocated, a DELETE's 204 only the API and the
// database.
func (l *haLoad) waitRecovered(t *testing.T, killedAt, killDone time.Time) (created, answered time.Time) {
	t.Helper()
	dbtest.WaitFor(t, patroniWait, "a 201 after the failover", func() bool {
		var failed time.Time
		reqs := l.all()
		for _, r := range reqs {
			if r.status != http.StatusCreated && r.status != http.StatusNoContent && r.start.After(killedAt) &&
				(failed.IsZero() || r.start.Before(failed)) {
				failed = r.start
			}
		}
		if failed.IsZero() {
			return false
		}
		if failed.Before(killDone) {
			failed = killDone
		}
		created, answered = time.Time{}, time.Time{}
		for _, r := range reqs {
			if r.start.Before(failed) || (r.status != http.StatusCreated && r.status != http.StatusNoContent) {
				continue
			}
			if answered.IsZero() || r.end.Before(answered) {
				answered = r.end
			}
			if r.status == http.StatusCreated && (created.IsZero() || r.end.Before(created)) {
				created = r.end
			}
		}
		return !created.IsZero()
	})
	return created, answered
}

// unavailableSince counts the 503s to requests sent after t0 and returns
// the longest one took.
func (l *haLoad) unavailableSince(t0 time.Time) (n int, slowest time.Duration) {
	for _, r := range l.all() {
		if r.status == http.StatusServiceUnavailable && r.start.After(t0) {
			n++
			slowest = max(slowest, r.end.Sub(r.start))
		}
	}
	return n, slowest
}

// createdBetween counts the 201s answered between t0 and t1.
func (l *haLoad) createdBetween(t0, t1 time.Time) float64 {
	n := 0
	for _, r := range l.all() {
		if r.method == http.MethodPost && r.status == http.StatusCreated && r.end.After(t0) && r.end.Before(t1) {
			n++
		}
	}
	return float64(n)
}
