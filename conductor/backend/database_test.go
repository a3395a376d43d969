package backend

import (
	"context"
	"fmt"
	"github.com/metalloc/metalloc/allocation"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
)

// fixture is a database with conductors and helpers to add nodes.
type fixture struct {
	t    *testing.T
	pool *pgxpool.Pool
	q    *Queries
	// aq is package allocation's statements (the API's inserts).
	aq *allocation.Queries
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := dbtest.New(t)
	return &fixture{t: t, pool: pool, q: New(pool), aq: allocation.New(pool)}
}

// conductor registers a live conductor named name.
func (f *fixture) conductor(name string) int64 { return dbtest.Conductor(f.t, f.pool, name, 0, true) }

// node adds an available, powered node.
func (f *fixture) node(name, rc string, traits ...string) int64 {
	id, _ := dbtest.Node(f.t, f.pool, dbtest.NodeSpec{Name: name, ResourceClass: rc, Traits: traits})
	return id
}

func (f *fixture) allocation(name *string, rc string, traits ...string) allocation.CreateAllocationRow {
	if traits == nil {
		traits = []string{}
	}
	row, err := f.aq.CreateAllocation(context.Background(), allocation.CreateAllocationParams{
		Uuid: uuid.New(), Name: name, ResourceClass: rc, Extra: []byte("{}"), State: allocation.StateAllocating, Traits: traits,
	})
	require.NoError(f.t, err)
	return row
}

// get reads allocation id as the API shows it.
func (f *fixture) get(id int64) allocation.View {
	var u uuid.UUID
	require.NoError(f.t, f.pool.QueryRow(context.Background(), `SELECT uuid FROM allocations WHERE id = $1`, id).Scan(&u))
	v, err := allocation.NewStore(f.pool).Get(context.Background(), u.String())
	require.NoError(f.t, err)
	return v
}

// claim takes up to n unowned allocating rows for conductor me, as
// conductor.Rows.Claim does, so that tests can drive Process (the slow path)
// themselves.
func claim(t *testing.T, a *Database, me int64, n int) []Claimed {
	ctx := context.Background()
	rows, err := a.pool.Query(ctx, `UPDATE allocations SET conductor_affinity = $1
		 WHERE id IN (SELECT id FROM allocations WHERE state = 'allocating' AND conductor_affinity IS NULL
		               ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING id`, me, n)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	out, err := Read(ctx, a.pool, me, ids)
	require.NoError(t, err)
	return out
}

// drain claims and processes until nothing is left, as one conductor.
func drain(t *testing.T, a *Database, me int64) {
	ctx := context.Background()
	for {
		claimed := claim(t, a, me, 4)
		if len(claimed) == 0 {
			return
		}
		for _, c := range claimed {
			_, err := settle(ctx, a, me, c)
			require.NoError(t, err)
		}
	}
}

func TestReserveConcurrentConductors(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 40 {
		traits := []string{"CUSTOM_A"}
		if i%2 == 0 {
			traits = append(traits, "CUSTOM_B")
		}
		f.node(fmt.Sprintf("gold-%d", i), "gold", traits...)
	}
	for i := range 10 {
		f.node(fmt.Sprintf("silver-%d", i), "silver")
	}
	var ids []int64
	for range 30 { // 20 fit CUSTOM_B, so 10 of these must fail
		ids = append(ids, f.allocation(nil, "gold", "CUSTOM_B").ID)
	}
	for range 15 { // 10 silver nodes: 5 must fail
		ids = append(ids, f.allocation(nil, "silver").ID)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		me := f.conductor(fmt.Sprintf("c%d", i))
		a := NewDatabase(f.pool, zaptest.NewLogger(t))
		wg.Add(1)
		go func() { defer wg.Done(); drain(t, a, me) }()
	}
	wg.Wait()

	states := map[string]map[allocation.State]int{}
	nodes := map[uuid.UUID]int{}
	for _, id := range ids {
		v := f.get(id)
		if states[v.ResourceClass] == nil {
			states[v.ResourceClass] = map[allocation.State]int{}
		}
		states[v.ResourceClass][v.State]++
		if v.State == allocation.StateActive {
			require.NotNil(t, v.NodeUUID)
			nodes[*v.NodeUUID]++
			var held uuid.UUID
			require.NoError(t, f.pool.QueryRow(context.Background(),
				`SELECT instance_uuid FROM nodes WHERE uuid = $1 AND allocation_id = $2`, *v.NodeUUID, id).Scan(&held))
			require.Equal(t, v.Uuid, held)
		} else {
			require.Equal(t, allocation.StateError, v.State)
			require.NotNil(t, v.LastError)
		}
	}
	require.Equal(t, map[allocation.State]int{allocation.StateActive: 20, allocation.StateError: 10}, states["gold"])
	require.Equal(t, map[allocation.State]int{allocation.StateActive: 10, allocation.StateError: 5}, states["silver"])
	for n, count := range nodes {
		require.Equal(t, 1, count, "node %s booked twice", n)
	}
}

func TestReserveLastErrorCountsFilters(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 5 {
		f.node(fmt.Sprintf("g%d", i), "gold", "CUSTOM_NVME")
	}
	_, err := f.pool.Exec(context.Background(), `UPDATE nodes SET maintenance = true WHERE name = 'g0'`)
	require.NoError(t, err)
	row := f.allocation(nil, "gold", "CUSTOM_GPU_A100")
	drain(t, NewDatabase(f.pool, zaptest.NewLogger(t)), f.conductor("c"))
	v := f.get(row.ID)
	require.Equal(t, allocation.StateError, v.State)
	require.Equal(t, fmt.Sprintf("Failed to process allocation %s: no suitable nodes have the requested traits CUSTOM_GPU_A100. "+
		"(no node fits: 5 of resource class gold, 4 available, 0 with traits CUSTOM_GPU_A100)", v.Uuid), *v.LastError)
}

func TestReservePrefersNodeNamedLikeAllocation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 20 {
		f.node(fmt.Sprintf("n%d", i), "gold")
	}
	name := "n13"
	row := f.allocation(&name, "gold")
	drain(t, NewDatabase(f.pool, zaptest.NewLogger(t)), f.conductor("c"))
	v := f.get(row.ID)
	require.Equal(t, allocation.StateActive, v.State)
	var nodeName string
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT name FROM nodes WHERE uuid = $1`, *v.NodeUUID).Scan(&nodeName))
	require.Equal(t, "n13", nodeName)
}

func TestProcessIsGuardedByConductorAffinity(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.node("n1", "gold")
	row := f.allocation(nil, "gold")
	a := NewDatabase(f.pool, zaptest.NewLogger(t))
	me, other := f.conductor("slow"), f.conductor("new-owner")
	claimed := claim(t, a, me, 1)
	require.Len(t, claimed, 1)
	// Another conductor takes the row over while "slow" is paused.
	tag, err := f.pool.Exec(context.Background(),
		`UPDATE allocations SET conductor_affinity = $1 WHERE id = $2 AND conductor_affinity = $3`, other, row.ID, me)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	out, err := settle(context.Background(), a, me, claimed[0])
	require.NoError(t, err)
	require.Equal(t, Lost, out)
	v := f.get(row.ID)
	require.Equal(t, allocation.StateAllocating, v.State)
	require.Nil(t, v.NodeUUID)
	var free bool
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT instance_uuid IS NULL FROM nodes WHERE name = 'n1'`).Scan(&free))
	require.True(t, free, "a lost reservation must not touch the node")
	// The failure path is guarded the same way.
	out, err = a.fail(context.Background(), me, claimed[0], "late")
	require.NoError(t, err)
	require.Equal(t, Lost, out)
	require.Equal(t, allocation.StateAllocating, f.get(row.ID).State)
}

func TestClaimReserveBatch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.node("only-gpu", "gpu")
	for i := range 3 {
		f.node(fmt.Sprintf("s%d", i), "silver")
	}
	// Two want the single gpu node, one wants a class nobody has, three fit.
	var ids []int64
	for _, rc := range []string{"gpu", "gpu", "none", "silver", "silver", "silver"} {
		ids = append(ids, f.allocation(nil, rc).ID)
	}
	a := NewDatabase(f.pool, zaptest.NewLogger(t))
	me := f.conductor("c")
	reserved, rest, err := a.ClaimReserve(ctx, me, 10)
	require.NoError(t, err)
	require.Len(t, reserved, 4, "one gpu and three silver")
	require.Len(t, rest, 2, "the second gpu request and the unknown class")
	for _, id := range ids {
		v := f.get(id)
		require.Equal(t, me, *v.ConductorAffinity, "every row is claimed")
	}
	for _, c := range reserved {
		v := f.get(c.ID)
		require.Equal(t, allocation.StateActive, v.State)
		require.NotNil(t, v.NodeUUID)
	}
	for _, c := range rest {
		require.Equal(t, allocation.StateAllocating, f.get(c.ID).State)
		out, err := settle(ctx, a, me, c)
		require.NoError(t, err)
		require.Equal(t, Failed, out)
		require.Contains(t, *f.get(c.ID).LastError, "no node fits")
	}
	// Nothing left to claim.
	reserved, rest, err = a.ClaimReserve(ctx, me, 10)
	require.NoError(t, err)
	require.Empty(t, reserved)
	require.Empty(t, rest)
}

// TestClaimReserveBatchOneNodeEach: the claim reserves its whole batch at
// the end (migration 00039), so a row's pick must not return a node an
// earlier row of the same batch picked, whichever way it picks: by name
// (Ironic's name-first rule), among candidate_nodes, or by walk. Each
// reserved node holds its allocation as metalloc_hold writes it.
func TestClaimReserveBatchOneNodeEach(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.node("solo", "gold", "CUSTOM_A")
	var solo uuid.UUID
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT uuid FROM nodes WHERE name = 'solo'`).Scan(&solo))
	named := "solo"
	rows := []allocation.CreateAllocationRow{f.allocation(&named, "gold", "CUSTOM_A")}
	for range 2 { // both may only have solo
		row := f.allocation(nil, "gold")
		_, err := f.pool.Exec(ctx, `UPDATE allocations SET candidate_nodes = $2 WHERE id = $1`, row.ID, []uuid.UUID{solo})
		require.NoError(t, err)
		rows = append(rows, row)
	}
	rows = append(rows, f.allocation(nil, "gold")) // the walk finds solo taken too

	a := NewDatabase(f.pool, zaptest.NewLogger(t))
	me := f.conductor("c")
	reserved, rest, err := a.ClaimReserve(ctx, me, 10)
	require.NoError(t, err)
	require.Len(t, reserved, 1)
	require.Len(t, rest, 3)
	require.Equal(t, rows[0].ID, reserved[0].ID, "the named row, first in the batch, gets solo")
	var held int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM nodes
		WHERE uuid = $1 AND instance_uuid = $2 AND allocation_id = $3 AND instance_info->'traits' = '["CUSTOM_A"]'`,
		solo, rows[0].Uuid, rows[0].ID).Scan(&held))
	require.Equal(t, 1, held, "solo holds the named row with its traits")
	for _, row := range rows[1:] {
		v := f.get(row.ID)
		require.Equal(t, allocation.StateAllocating, v.State, "row %d", row.ID)
		require.Equal(t, me, *v.ConductorAffinity, "claimed for the general path")
		require.Nil(t, v.NodeUUID)
	}
}

// TestClaimPlanIgnoresStatistics: the database backend's claim reads
// allocations by key even in a session that planned it while the table
// was analyzed empty (every allocation deleted, then a conductor started):
// migration 00034. The same connection's claim of one row with 9,000
// finished allocations in the table reads about as many buffers as with
// none.
func TestClaimPlanIgnoresStatistics(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	for i := range 3 {
		f.node(fmt.Sprintf("gold-%d", i), "gold")
	}
	before, after := claimBuffersGrowth(t, f, "allocations",
		`SELECT * FROM metalloc_claim_reserve($1, 1) WHERE out_reserved`, func() {
			_, err := f.pool.Exec(ctx, `INSERT INTO allocations (uuid, resource_class, state, last_error)
				SELECT gen_random_uuid(), 'gold', 'error', 'x' FROM generate_series(1, 9000)`)
			require.NoError(t, err)
		})
	// The indexes one level deeper cost a few more; the whole table read
	// would cost hundreds.
	require.Less(t, after, before+60, "buffers of a claim: %d with no other allocation, %d with 9,000", before, after)
}

// claimBuffersGrowth is the plan check of both backends' claims: with
// table analyzed empty, one session of its own (ownSession) claims a new
// "gold" allocation with claim ($1: a conductor's id) twice, the first
// making its plans; fill then adds 9,000 rows of others, and the session
// claims once more. It returns the buffers of the second and third claims.
func claimBuffersGrowth(t *testing.T, f *fixture, table, claim string, fill func()) (before, after int) {
	t.Helper()
	_, err := f.pool.Exec(context.Background(), "ANALYZE "+table)
	require.NoError(t, err)
	me := f.conductor("c1")
	c := ownSession(t, f.pool)
	claimBuffers := func() int {
		f.allocation(nil, "gold")
		return explainBuffers(t, c, claim, me)
	}
	claimBuffers() // planned with the table empty
	before = claimBuffers()
	fill()
	return before, claimBuffers()
}

// explainBuffers runs sql on c under EXPLAIN (ANALYZE, BUFFERS) and
// returns the shared buffers it read (hit or not), its nested statements'
// included.
func explainBuffers(t *testing.T, c *pgx.Conn, sql string, args ...any) int {
	t.Helper()
	var plan []struct {
		Plan struct {
			SharedHit  int `json:"Shared Hit Blocks"`
			SharedRead int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	require.NoError(t, c.QueryRow(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&plan))
	require.Len(t, plan, 1)
	return plan[0].Plan.SharedHit + plan[0].Plan.SharedRead
}

// ownSession opens a connection outside pool, closed when t ends: its
// plans are its own, made when it first runs a statement.
func ownSession(t *testing.T, pool *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), pool.Config().ConnConfig.ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
