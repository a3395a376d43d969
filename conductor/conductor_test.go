package conductor

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"
	"github.com/metalloc/metalloc/conductor/backend"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/placement/placementtest"
)

func addAllocations(t *testing.T, pool *pgxpool.Pool, n int, rc string) {
	t.Helper()
	for range n {
		dbtest.Allocation(t, pool, dbtest.AllocationSpec{ResourceClass: rc})
	}
}

func start(t *testing.T, pool *pgxpool.Pool, cfg Config) (stop func() error) {
	t.Helper()
	svc, err := NewService(cfg, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	return runService(t, svc)
}

// runService runs svc until the test ends (or stop is called) and returns
// once it is ready.
func runService(t testing.TB, svc *Service) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	svc.OnReady = func() { close(ready) }
	errc := make(chan error, 1)
	go func() { errc <- svc.Run(ctx) }()
	select {
	case <-ready:
	case err := <-errc:
		cancel()
		require.NoError(t, err)
	}
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() { cancel(); runErr = <-errc })
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// startConductors starts n conductors with cfg, named c0 … c<n-1>.
func startConductors(t *testing.T, pool *pgxpool.Pool, cfg Config, n int) {
	t.Helper()
	for i := range n {
		c := cfg
		c.Hostname = fmt.Sprintf("c%d", i)
		start(t, pool, c)
	}
}

func TestTwoConductorsProcessEverythingOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 50, "gold")
	// Poll slowly: the wake-up must come from NOTIFY.
	cfg := Config{PollInterval: time.Hour, Workers: 4, ClaimBatch: 2}
	startConductors(t, pool, cfg, 2)
	addAllocations(t, pool, 60, "gold")
	dbtest.WaitFor(t, 30*time.Second, "every allocation to leave allocating", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
	}, func() {
		rows, _ := pool.Query(context.Background(), `SELECT id, uuid::text, state, coalesce(conductor_affinity, 0), coalesce(node_id, 0) FROM allocations ORDER BY id`)
		for rows.Next() {
			var id, ca, nid int64
			var u, st string
			_ = rows.Scan(&id, &u, &st, &ca, &nid)
			t.Logf("row %d %s %s conductor=%d node=%d", id, u, st, ca, nid)
		}
		t.Logf("nodes held: %d", dbtest.Count(t, pool, `SELECT count(*) FROM nodes WHERE allocation_id IS NOT NULL`))
	})
	require.Equal(t, 50, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`))
	require.Equal(t, 10, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'error'`))
	require.Equal(t, 50, dbtest.Count(t, pool, `SELECT count(DISTINCT node_id) FROM allocations WHERE state = 'active'`))
	require.Equal(t, 2, dbtest.Count(t, pool, `SELECT count(DISTINCT conductor_affinity) FROM allocations`))
}

func TestDuplicateHostnameRefusedWhileAlive(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	stop := start(t, pool, Config{Hostname: "same"})
	svc, err := NewService(Config{Hostname: "same"}, pool, zaptest.NewLogger(t))
	require.NoError(t, err)
	err = svc.Run(context.Background())
	require.True(t, errors.Is(err, ErrHostnameTaken), err)
	// After a clean stop the row is offline and the name can be reused.
	require.NoError(t, stop())
	require.Equal(t, 0, dbtest.Count(t, pool, `SELECT count(*) FROM conductors WHERE hostname = 'same' AND online`))
	start(t, pool, Config{Hostname: "same"})
}

func TestResumesOwnUnfinishedRowsAtStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 5, "gold")
	id := dbtest.Conductor(t, pool, "crashed", time.Hour, true)
	// Rows this conductor claimed before it crashed.
	for range 3 {
		dbtest.Allocation(t, pool, dbtest.AllocationSpec{Conductor: id})
	}
	start(t, pool, Config{Hostname: "crashed", PollInterval: time.Hour})
	dbtest.WaitFor(t, 10*time.Second, "the crashed conductor's 3 rows to be resumed and active", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active' AND conductor_affinity = $1`, id) == 3
	})
}

// pbPlacement starts an in-process metalloc-placement on pool's database
// and mirrors every node of class rc into it as the resource tracker would
// (provider uuid = node uuid, CUSTOM_<RC> total 1).
func pbPlacement(t *testing.T, pool *pgxpool.Pool, rc string) *client.Client {
	t.Helper()
	ctx := context.Background()
	srv := placementtest.NewServerOn(t, pool, placement.Options{})
	pc := client.New(srv.URL, "admin", 10*time.Second)
	class := client.NormalizeClass(rc)
	require.NoError(t, pc.EnsureResourceClass(ctx, class))
	rows, err := pool.Query(ctx, `SELECT uuid, name FROM nodes WHERE resource_class = $1`, rc)
	require.NoError(t, err)
	type node struct {
		id   uuid.UUID
		name string
	}
	var nodes []node
	for rows.Next() {
		var n node
		require.NoError(t, rows.Scan(&n.id, &n.name))
		nodes = append(nodes, n)
	}
	require.NoError(t, rows.Err())
	for _, n := range nodes {
		p, err := pc.CreateProvider(ctx, n.id, n.name)
		require.NoError(t, err)
		_, err = pc.PutInventories(ctx, n.id, client.Inventories{Generation: p.Generation, Inventories: map[string]client.Inventory{
			class: {Total: 1, MinUnit: 1, MaxUnit: 1, StepSize: 1, AllocationRatio: 1},
		}})
		require.NoError(t, err)
	}
	return pc
}

func TestPlacementBackendConductors(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	dbtest.Nodes(t, pool, 5, "gold")
	pc := pbPlacement(t, pool, "gold")
	cfg := Config{PollInterval: 100 * time.Millisecond, Workers: 4, ClaimBatch: 2, Backend: BackendPlacement, Placement: pc}
	startConductors(t, pool, cfg, 2)
	addAllocations(t, pool, 12, "gold")
	dbtest.WaitFor(t, 30*time.Second, "every allocation to leave allocating", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
	})
	require.Equal(t, 5, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`))
	require.Equal(t, 5, dbtest.Count(t, pool, `SELECT count(DISTINCT node_id) FROM allocations WHERE state = 'active'`))
	require.Equal(t, 7, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'error' AND last_error LIKE '%no node%'`))
	// Placement holds exactly the active allocations, on their nodes.
	rows, err := pool.Query(context.Background(), `
		SELECT a.uuid, a.state, n.uuid FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id`)
	require.NoError(t, err)
	type alloc struct {
		id    uuid.UUID
		state string
		node  *uuid.UUID
	}
	var all []alloc
	for rows.Next() {
		var a alloc
		require.NoError(t, rows.Scan(&a.id, &a.state, &a.node))
		all = append(all, a)
	}
	require.NoError(t, rows.Err())
	for _, a := range all {
		cur, err := pc.GetAllocations(context.Background(), a.id)
		require.NoError(t, err)
		if a.state == "active" {
			require.Len(t, cur.Allocations, 1)
			_, ok := cur.Allocations[*a.node]
			require.True(t, ok)
		} else {
			require.Empty(t, cur.Allocations)
		}
	}
	require.Equal(t, 5, dbtest.Count(t, pool, `SELECT count(*) FROM placement_claims`))
	// The database fast path did not run: every active row went through
	// Placement (claim log entry on its node).
	require.Equal(t, 5, dbtest.Count(t, pool, `
		SELECT count(*) FROM allocations a JOIN nodes n ON n.id = a.node_id
		  JOIN placement_claims c ON c.consumer_uuid = a.uuid AND c.provider_uuid = n.uuid`))
}

func TestConfigBackend(t *testing.T) {
	t.Parallel()
	c := Config{Hostname: "h"}.WithDefaults()
	require.Equal(t, BackendDatabase, c.Backend)
	require.NoError(t, c.Validate())
	c.Backend = BackendPlacement
	require.ErrorContains(t, c.Validate(), "needs a Placement client")
	c.Placement = client.New("http://127.0.0.1:8778", "admin", 0)
	require.NoError(t, c.Validate())
	require.Equal(t, "auto", c.PlacementMode)
	for _, m := range []string{"local", "http", "auto"} {
		c.PlacementMode = m
		require.NoError(t, c.Validate())
	}
	c.PlacementMode = "grpc"
	require.ErrorContains(t, c.Validate(), `placement_backend.mode: "grpc" is none of`)
	c.PlacementMode = "auto"
	c.Backend = "etcd"
	require.ErrorContains(t, c.Validate(), `"etcd" is neither`)
}

// One row whose reservation violates a constraint (its uuid is already some
// node's instance_uuid) fails the fast path's whole batch: the batch goes
// through the slow path instead, where that row fails with a reason and the
// others are reserved, rather than blocking the batch at every attempt.
func TestBatchFailureFallsBackToSlowPath(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	batchFailure(t, pool, func() Config { return Config{Hostname: "c", PollInterval: 50 * time.Millisecond} })
}

// batchFailure runs the batch-failure scenario on pool and checks its
// outcome: four nodes, one of them taken below by a row's uuid (the bad
// row's slow path must still find a free node to fail on, else it fails
// with "no available nodes" instead, as the two good rows may be reserved
// first), two good rows, one conductor with config() (called once the
// nodes exist). It returns the bad row's uuid.
func batchFailure(t *testing.T, pool *pgxpool.Pool, config func() Config) uuid.UUID {
	t.Helper()
	dbtest.Nodes(t, pool, 4, "gold")
	_, bad := dbtest.Allocation(t, pool, dbtest.AllocationSpec{})
	_, err := pool.Exec(context.Background(), `UPDATE nodes SET instance_uuid = $1, provision_state = 'active' WHERE name = 'gold-1'`, bad)
	require.NoError(t, err)
	cfg := config()
	addAllocations(t, pool, 2, "gold")
	start(t, pool, cfg)
	dbtest.WaitFor(t, 20*time.Second, "every allocation to leave allocating", func() bool {
		return dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'allocating'`) == 0
	})
	var state, lastErr string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT state, coalesce(last_error, '') FROM allocations WHERE uuid = $1`, bad).Scan(&state, &lastErr))
	require.Equal(t, "error", state)
	require.Contains(t, lastErr, "is already associated with another node")
	require.Equal(t, 2, dbtest.Count(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`))
	return bad
}

// TestPlacementBatchFailureFallsBackToSlowPath is
// TestBatchFailureFallsBackToSlowPath for the placement backend in mode
// local: the row whose uuid is already a node's instance_uuid fails the
// one-statement batch (the node hold violates the instance's uniqueness),
// nothing of that batch is written (no Placement consumer or allocation
// either), the batch is claimed for the selection path, the bad row fails
// with a reason and the others are reserved, Placement holding exactly
// them.
func TestPlacementBatchFailureFallsBackToSlowPath(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	var pc *client.Client
	bad := batchFailure(t, pool, func() Config {
		pc = pbPlacement(t, pool, "gold")
		return Config{Hostname: "c", PollInterval: 50 * time.Millisecond, Backend: BackendPlacement,
			Placement: pc, PlacementMode: "local"}
	})
	cur, err := pc.GetAllocations(context.Background(), bad)
	require.NoError(t, err)
	require.Empty(t, cur.Allocations, "the failed row left a Placement allocation")
	require.Equal(t, 2, dbtest.Count(t, pool, `
		SELECT count(*) FROM allocations a JOIN nodes n ON n.id = a.node_id
		  JOIN placement.resource_providers rp ON rp.uuid = n.uuid
		  JOIN placement.allocations pa ON pa.resource_provider_id = rp.id
		  JOIN placement.consumers c ON c.id = pa.consumer_id AND c.uuid = a.uuid
		 WHERE a.state = 'active'`))
	require.Equal(t, 2, dbtest.Count(t, pool, `SELECT count(*) FROM placement.allocations`))
}

// claimRows claims up to n unowned allocating rows for conductor me without
// reserving them (a conductor paused between its claim and its
// reservation) and reads them as the backends do.
func claimRows(t *testing.T, pool *pgxpool.Pool, me int64, n int) []backend.Claimed {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `UPDATE allocations SET conductor_affinity = $1
		 WHERE id IN (SELECT id FROM allocations WHERE state = 'allocating' AND conductor_affinity IS NULL
		               ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING id`, me, n)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	claimed, err := backend.Read(ctx, pool, me, ids)
	require.NoError(t, err)
	return claimed
}
