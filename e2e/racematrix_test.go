package e2e

import (
	"bytes"
	"context"
	"fmt"
	"github.com/metalloc/metalloc/conductor/backend"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/conductor"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/placement/placementtest"
	"github.com/metalloc/metalloc/web"
)

// The race matrix: every pair of the operations that touch both a node and
// an allocation runs against each other, many times, on the same node and
// allocations, and nothing may deadlock, answer 5xx, or break an invariant
// (conductor/doc.go, "Lock order"). Each round starts from a fresh cell:
//
//   - node N (class "race"), either active in maintenance holding allocation
//     A (odd rounds) or available and free (even rounds);
//   - allocation B, allocating, candidate_nodes [N], owned by live
//     conductor L1; allocation C, the same but owned by dead conductor D;
//     allocation U, the same but unclaimed; in TestRaceMatrix allocation P,
//     the same but owned by live conductor L3, which reserves through
//     Placement.
//
// TestRaceMatrix runs the operations in goroutines of this process (two
// in-process API servers, conductor operations called directly);
// TestRaceMatrixProcesses runs them over HTTP against a real metalloc-api
// with two real metalloc-conductor processes doing the reservations and
// takeovers.

// cell is one round's node and allocations.
type cell struct {
	node          uuid.UUID
	nodeID        int64
	active        uuid.UUID // A (uuid.Nil in even rounds)
	owned, orphan int64     // B (owned by L1) and C (owned by dead D)
	placed        int64     // P, the same but owned by L3 (placement backend)
	l1, l2, l3    int64     // live conductor ids
	dead          int64     // dead conductor id
	apiURLs       []string  // API servers, one picked per request
}

// matrixOp is one operation of the matrix. It returns the HTTP status the
// client saw (conductor operations: 200, or 500 for an unexpected error).
type matrixOp struct {
	name string
	run  func(ctx context.Context, c *cell) int
}

// rig is what the operations run against.
type rig struct {
	pool      *pgxpool.Pool
	alloc     *backend.Database
	rows      *conductor.Rows
	placement *backend.Placement
	// local is the placement backend in mode local (in-process claims).
	local   *backend.Placement
	tracker *conductor.Tracker
}

func call(ctx context.Context, c *cell, method, path, body string) int {
	url := c.apiURLs[rand.IntN(len(c.apiURLs))] + path
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 599
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 599
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 {
		fmt.Fprintf(os.Stderr, "race matrix: %s %s -> %d %s\n", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// apiOps are the operations every variant runs over HTTP.
func apiOps() []matrixOp {
	return []matrixOp{
		{"delete allocation", func(ctx context.Context, c *cell) int {
			return call(ctx, c, http.MethodDelete, "/v1/allocations/"+c.active.String(), "")
		}},
		{"delete node", func(ctx context.Context, c *cell) int {
			return call(ctx, c, http.MethodDelete, "/v1/nodes/"+c.node.String(), "")
		}},
		{"tear down", func(ctx context.Context, c *cell) int {
			return call(ctx, c, http.MethodPut, "/v1/nodes/"+c.node.String()+"/states/provision", `{"target": "deleted"}`)
		}},
		{"remove instance_uuid", func(ctx context.Context, c *cell) int {
			return call(ctx, c, http.MethodPatch, "/v1/nodes/"+c.node.String(), `[{"op": "remove", "path": "/instance_uuid"}]`)
		}},
		{"maintenance off and on", func(ctx context.Context, c *cell) int {
			if s := call(ctx, c, http.MethodDelete, "/v1/nodes/"+c.node.String()+"/maintenance", ""); s >= 500 {
				return s
			}
			return call(ctx, c, http.MethodPut, "/v1/nodes/"+c.node.String()+"/maintenance", `{"reason": "race"}`)
		}},
		{"backfill", func(ctx context.Context, c *cell) int {
			return call(ctx, c, http.MethodPost, "/v1/allocations", fmt.Sprintf(`{"node": "%s"}`, c.node))
		}},
		{"patch allocation", func(ctx context.Context, c *cell) int {
			return call(ctx, c, http.MethodPatch, "/v1/allocations/"+c.active.String(),
				`[{"op": "add", "path": "/extra/race", "value": "x"}]`)
		}},
	}
}

// settle processes owned row a as a conductor does: Process again after
// each Waiting (every fitting node locked), once a.Wait.Retry is up.
func settle(ctx context.Context, b backend.Backend, me int64, a backend.Claimed) error {
	for {
		out, err := b.Process(ctx, me, &a)
		if err != nil || out != backend.Waiting {
			return err
		}
		t := time.NewTimer(a.Wait.Retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// conductorOps are the conductor's operations, called in this process.
func (r *rig) conductorOps() []matrixOp {
	status := func(err error) int {
		if err != nil {
			fmt.Fprintf(os.Stderr, "race matrix: conductor operation: %v\n", err)
			return 500
		}
		return 200
	}
	process := func(ctx context.Context, me int64, cs []backend.Claimed) error {
		for _, a := range cs {
			if err := settle(ctx, r.alloc, me, a); err != nil {
				return err
			}
		}
		return nil
	}
	return []matrixOp{
		{"reserve (slow path)", func(ctx context.Context, c *cell) int {
			owned, err := r.rows.Owned(ctx, c.l1)
			if err == nil {
				err = process(ctx, c.l1, owned)
			}
			return status(err)
		}},
		{"claim and reserve (fast path)", func(ctx context.Context, c *cell) int {
			_, rest, err := r.alloc.ClaimReserve(ctx, c.l2, 4)
			if err == nil {
				err = process(ctx, c.l2, rest)
			}
			return status(err)
		}},
		{"take over", func(ctx context.Context, c *cell) int {
			dead, err := r.rows.DeadOwners(ctx, c.l2)
			for _, d := range dead {
				var won []backend.Claimed
				if won, _, err = r.rows.TakeOver(ctx, c.l2, d, 10); err == nil {
					err = process(ctx, c.l2, won)
				}
			}
			return status(err)
		}},
		{"release", func(ctx context.Context, c *cell) int {
			_, err := r.rows.Release(ctx, c.l1)
			return status(err)
		}},
		{"reserve through Placement", func(ctx context.Context, c *cell) int {
			owned, err := r.rows.Owned(ctx, c.l3)
			for _, a := range owned {
				if err == nil {
					err = settle(ctx, r.placement, c.l3, a)
				}
			}
			return status(err)
		}},
		{"reserve through local Placement", func(ctx context.Context, c *cell) int {
			owned, err := r.rows.Owned(ctx, c.l3)
			if err == nil && len(owned) > 0 {
				// The batch path first (one transaction), then Process
				// for what it leaves.
				_, owned = r.local.ClaimBatch(ctx, c.l3, owned)
			}
			for _, a := range owned {
				if err == nil {
					err = settle(ctx, r.local, c.l3, a)
				}
			}
			return status(err)
		}},
		{"resource tracker sync", func(ctx context.Context, c *cell) int {
			_, err := r.tracker.Sync(ctx)
			return status(err)
		}},
	}
}

// newCell creates round's cell: see the comment at the top.
func newCell(t *testing.T, pool *pgxpool.Pool, round int, c *cell) {
	spec := dbtest.NodeSpec{Name: fmt.Sprintf("race-%d", round), ResourceClass: "race"}
	if round%2 == 1 {
		spec.ProvisionState, spec.Maintenance = "active", true
	}
	c.nodeID, c.node = dbtest.Node(t, pool, spec)
	c.active = uuid.Nil
	if round%2 == 1 {
		_, c.active = dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: "race", Node: c.nodeID})
	}
	cands := []uuid.UUID{c.node}
	c.owned, _ = dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: "race", CandidateNodes: cands, Conductor: c.l1})
	c.orphan, _ = dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: "race", CandidateNodes: cands, Conductor: c.dead})
	if c.l3 != 0 {
		c.placed, _ = dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: "race", CandidateNodes: cands, Conductor: c.l3})
	}
	dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: "race", CandidateNodes: cands})
}

// dropCell removes everything of the round, node first (the lock order).
func dropCell(t *testing.T, pool *pgxpool.Pool, c *cell) {
	err := db.InTx(context.Background(), pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), `SELECT id FROM nodes WHERE id = $1 FOR UPDATE`, c.nodeID); err != nil {
			return err
		}
		if _, err := tx.Exec(context.Background(), `UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL WHERE id = $1`, c.nodeID); err != nil {
			return err
		}
		if _, err := tx.Exec(context.Background(), `DELETE FROM allocations WHERE candidate_nodes @> ARRAY[$1::uuid] OR node_id = $2 OR uuid = $3`, c.node, c.nodeID, c.active); err != nil {
			return err
		}
		_, err := tx.Exec(context.Background(), `DELETE FROM nodes WHERE id = $1`, c.nodeID)
		return err
	})
	require.NoError(t, err)
}

// deadlocks is PostgreSQL's count of deadlocks detected in the database of
// url, read on a fresh connection; afterWork, once every other session has
// ended (a backend reports its statistics when it exits).
func deadlocks(t *testing.T, url string, afterWork bool) int64 {
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	// A backend flushes its statistics as it exits: after the work, wait
	// until the sessions that did it are gone.
	dbtest.WaitFor(t, 30*time.Second, "the database's other sessions to end", func() bool {
		if !afterWork {
			return true
		}
		var others int
		require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others))
		return others == 0
	})
	var n int64
	require.NoError(t, conn.QueryRow(context.Background(),
		`SELECT coalesce(deadlocks, 0) FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
	return n
}

// runMatrix runs every unordered pair of ops (each op against itself too)
// rounds times, each on a fresh cell, up to parallel cells at a time, and
// returns how many pairs ran and the statuses seen per op.
func runMatrix(t *testing.T, pool *pgxpool.Pool, ops []matrixOp, rounds, parallel int, base cell,
	settle func(*cell)) (pairs int, statuses map[string]map[int]int) {
	statuses = map[string]map[int]int{}
	var mu sync.Mutex
	record := func(name string, s int) {
		mu.Lock()
		defer mu.Unlock()
		if statuses[name] == nil {
			statuses[name] = map[int]int{}
		}
		statuses[name][s]++
	}
	// One round: a fresh cell, the two operations released at once, then
	// the invariants.
	race := func(a, b matrixOp, round int) {
		c := base
		newCell(t, pool, round, &c)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, o := range []matrixOp{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				s := o.run(ctx, &c)
				record(o.name, s)
				if s >= 500 {
					t.Errorf("%s (racing %s / %s, round %d): status %d", o.name, a.name, b.name, round, s)
				}
			}()
		}
		close(start)
		wg.Wait()
		if settle != nil {
			settle(&c)
		}
		if broken := dbtest.Broken(t, pool); len(broken) > 0 {
			t.Errorf("%s / %s, round %d: invariants broken: %s", a.name, b.name, round, strings.Join(broken, "; "))
		}
		dropCell(t, pool, &c)
	}
	sem := make(chan struct{}, parallel)
	var all sync.WaitGroup
	round := 0
	for i := range ops {
		for j := i; j < len(ops); j++ {
			pairs++
			for range rounds {
				round++
				sem <- struct{}{}
				all.Add(1)
				go func(a, b matrixOp, round int) {
					defer func() { <-sem; all.Done() }()
					race(a, b, round)
				}(ops[i], ops[j], round)
			}
		}
	}
	all.Wait()
	return pairs, statuses
}

// inProcessAPI serves the node and allocation API of metalloc-api from this
// process, logging to log.
func inProcessAPI(t *testing.T, pool *pgxpool.Pool, log *zap.Logger) string {
	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	e.JSONSerializer = web.JSONSerializer{}
	e.Use(web.RequestID(log), middleware.Recover())
	v1 := e.Group("/v1", web.IronicVersion())
	node.NewHandler(node.NewStore(pool), node.Deallocator{}, node.HandlerOptions{}).Register(v1)
	allocation.NewHandler(allocation.NewStore(pool), allocation.HandlerOptions{}).Register(v1)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestRaceMatrix(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	pool, err := db.Open(context.Background(), url, db.PoolOptions{MaxConns: 20, ApplicationName: "race-matrix"})
	require.NoError(t, err)
	before := deadlocks(t, url, false)

	// Every log line of both API servers and the conductor operations goes
	// to obs as well, to look for deadlock reports.
	core, obs := observer.New(zapcore.DebugLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel)).Core(), core))
	alloc := backend.NewDatabase(pool, log)
	alloc.LockedWait = 200 * time.Millisecond
	// The placement backend and the resource tracker against an in-process
	// metalloc-placement on the same database.
	pc := client.New(placementtest.NewServerOn(t, pool, placement.Options{}).URL, "admin", 10*time.Second)
	r := &rig{pool: pool, alloc: alloc, rows: conductor.NewRows(pool),
		placement: backend.NewPlacement(pool, pc, backend.PlacementConfig{Hostname: "live-3",
			Mode: backend.PlacementModeHTTP}, log),
		local: backend.NewPlacement(pool, pc, backend.PlacementConfig{Hostname: "live-3",
			Mode: backend.PlacementModeLocal, LockedWait: 200 * time.Millisecond}, log),
		tracker: conductor.NewTracker(pool, pc, conductor.TrackerConfig{}, log)}
	base := cell{
		l1:      dbtest.Conductor(t, pool, "live-1", 0, true),
		l2:      dbtest.Conductor(t, pool, "live-2", 0, true),
		l3:      dbtest.Conductor(t, pool, "live-3", 0, true),
		dead:    dbtest.Conductor(t, pool, "dead", time.Hour, true),
		apiURLs: []string{inProcessAPI(t, pool, log), inProcessAPI(t, pool, log)},
	}
	ops := append(apiOps(), r.conductorOps()...)
	rounds := 12
	if testing.Short() {
		rounds = 2
	}
	pairs, statuses := runMatrix(t, pool, ops, rounds, 1, base, nil)
	pool.Close()

	after := deadlocks(t, url, true)
	for _, e := range obs.All() {
		line := e.Message + " " + fmt.Sprint(e.ContextMap())
		require.NotContains(t, line, "deadlock detected", "log line: %s", line)
		require.NotContains(t, line, "40P01", "log line: %s", line)
	}
	require.Equal(t, before, after, "PostgreSQL detected deadlocks")
	t.Logf("race matrix (goroutines): %d ops, %d pairs x %d rounds; deadlocks %d -> %d; statuses %v",
		len(ops), pairs, rounds, before, after, statuses)
}

func TestRaceMatrixProcesses(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	stack, err := devstack.Start(context.Background(), devstack.Options{
		BinDir: binDir, DatabaseURL: url, Conductors: 2, LogDir: t.TempDir(), Log: zaptest.NewLogger(t),
		Env: []string{"METALLOC_LOG_LEVEL=info", "METALLOC_CONDUCTOR_TAKEOVER_SCHEDULE=@every 200ms",
			"METALLOC_CONDUCTOR_HEARTBEAT_INTERVAL=250ms", "METALLOC_CONDUCTOR_HEARTBEAT_TIMEOUT=1h",
			"METALLOC_CONDUCTOR_LOCKED_NODE_WAIT=200ms"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { stack.Stop(context.Background()) })
	pool, err := db.Open(context.Background(), url, db.PoolOptions{MaxConns: 8, ApplicationName: "race-matrix"})
	require.NoError(t, err)
	before := deadlocks(t, url, false)

	base := cell{
		l1:      dbtest.Conductor(t, pool, "absent-1", 0, true), // rows of a live conductor that is not running
		l2:      0,
		dead:    dbtest.Conductor(t, pool, "dead", time.Hour, true), // taken over by the processes
		apiURLs: []string{stack.APIURL},
	}
	reserve := matrixOp{"allocate (conductor processes)", func(ctx context.Context, c *cell) int {
		return call(ctx, c, http.MethodPost, "/v1/allocations",
			fmt.Sprintf(`{"resource_class": "race", "candidate_nodes": ["%s"]}`, c.node))
	}}
	ops := append(apiOps(), reserve)
	// Let the conductors finish with the cell (take over C, reserve or fail
	// U and the posted allocations) before it is checked and dropped.
	settle := func(c *cell) {
		dbtest.WaitFor(t, 20*time.Second, "conductors to finish the cell's allocations", func() bool {
			return dbtest.Count(t, pool, `SELECT count(*) FROM allocations
				WHERE state = 'allocating' AND candidate_nodes @> ARRAY[$1::uuid]
				  AND conductor_affinity IS DISTINCT FROM $2`, c.node, c.l1) == 0
		})
	}
	pairs, statuses := runMatrix(t, pool, ops, 3, 8, base, settle)
	pool.Close()
	stack.Stop(context.Background())

	after := deadlocks(t, url, true)
	for _, p := range append([]*devstack.Process{stack.API}, stack.Conductors...) {
		b, err := os.ReadFile(p.LogPath)
		require.NoError(t, err)
		require.False(t, bytes.Contains(b, []byte("deadlock detected")), "%s logged a deadlock", p.Name)
	}
	require.Equal(t, before, after, "PostgreSQL detected deadlocks")
	t.Logf("race matrix (processes): %d ops, %d pairs x 3 rounds, 8 cells at a time; deadlocks %d -> %d; statuses %v",
		len(ops), pairs, before, after, statuses)
}
