package allocation

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
)

// fixture is a database with conductors and helpers to add nodes.
type fixture struct {
	t    *testing.T
	pool *pgxpool.Pool
	q    *Queries
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := dbtest.New(t)
	return &fixture{t: t, pool: pool, q: New(pool)}
}

// conductor registers a live conductor named name.
func (f *fixture) conductor(name string) int64 { return dbtest.Conductor(f.t, f.pool, name, 0, true) }

// node adds an available, powered node.
func (f *fixture) node(name, rc string, traits ...string) int64 {
	id, _ := dbtest.Node(f.t, f.pool, dbtest.NodeSpec{Name: name, ResourceClass: rc, Traits: traits})
	return id
}

func (f *fixture) allocation(name *string, rc string, traits ...string) CreateAllocationRow {
	if traits == nil {
		traits = []string{}
	}
	row, err := f.q.CreateAllocation(context.Background(), CreateAllocationParams{
		Uuid: uuid.New(), Name: name, ResourceClass: rc, Extra: []byte("{}"), State: StateAllocating, Traits: traits,
	})
	require.NoError(f.t, err)
	return row
}

// get reads allocation id as the API shows it.
func (f *fixture) get(id int64) View {
	var u uuid.UUID
	require.NoError(f.t, f.pool.QueryRow(context.Background(), `SELECT uuid FROM allocations WHERE id = $1`, id).Scan(&u))
	v, err := NewStore(f.pool).Get(context.Background(), u.String())
	require.NoError(f.t, err)
	return v
}

// reserveAll reserves a node for every unowned allocating row, as conductor
// me would (claim, then metalloc_reserve, the database backend's slow path);
// a row no free node fits stays allocating. The API's tests need active
// allocations without linking the engine (package conductor/backend).
func (f *fixture) reserveAll(me int64) {
	f.t.Helper()
	ctx := context.Background()
	rows, err := f.pool.Query(ctx, `UPDATE allocations SET conductor_affinity = $1
		 WHERE state = 'allocating' AND conductor_affinity IS NULL RETURNING id`, me)
	require.NoError(f.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(f.t, err)
	for _, id := range ids {
		f.reserve(id, me)
	}
}

// reserve runs one reservation attempt (metalloc_reserve) for allocation
// id, owned by conductor me, and reports whether it is now active.
func (f *fixture) reserve(id, me int64) bool {
	f.t.Helper()
	var reserved *bool
	err := f.pool.QueryRow(context.Background(), `SELECT r.reserved
		  FROM allocations a,
		       metalloc_reserve(a.id, $2, a.resource_class,
		                        ARRAY(SELECT t.trait FROM allocation_traits t WHERE t.allocation_id = a.id ORDER BY 1),
		                        a.candidate_nodes, a.owner, a.name) r
		 WHERE a.id = $1`, id, me).Scan(&reserved)
	if errors.Is(err, pgx.ErrNoRows) {
		return false
	}
	require.NoError(f.t, err)
	return reserved != nil && *reserved
}
