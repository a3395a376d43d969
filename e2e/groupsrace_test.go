package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/allocgroup"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// groupCell is one round of TestGroupRaceMatrix: an active group G of two
// members M0 on node N0 and M1 on node N1.
type groupCell struct {
	group, m0, m1, n0, n1 uuid.UUID
}

// newGroupCell inserts an active group of two members holding two fresh
// available nodes, as a conductor's reservation leaves them.
func newGroupCell(t *testing.T, ctx context.Context, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}) groupCell {
	c := groupCell{group: uuid.New(), m0: uuid.New(), m1: uuid.New(), n0: uuid.New(), n1: uuid.New()}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var gid int64
		if err := tx.QueryRow(ctx, `INSERT INTO allocation_groups (uuid, count, resource_class, state)
			VALUES ($1, 2, 'race', 'active') RETURNING id`, c.group).Scan(&gid); err != nil {
			return err
		}
		for _, m := range []struct{ a, n uuid.UUID }{{c.m0, c.n0}, {c.m1, c.n1}} {
			var nid, aid int64
			if err := tx.QueryRow(ctx, `INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, power_state)
				VALUES ($1, $2, 'fake-hardware', 'race', 'available', 'power off') RETURNING id`,
				m.n, "n-"+m.n.String()[:8]).Scan(&nid); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `INSERT INTO allocations (uuid, resource_class, state, node_id, group_id)
				VALUES ($1, 'race', 'active', $2, $3) RETURNING id`, m.a, nid, gid).Scan(&aid); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT metalloc_hold($1, $2, $3, '{}')`, nid, aid, m.a); err != nil {
				return err
			}
		}
		return nil
	}))
	return c
}

// TestGroupRaceMatrix runs the deletes that touch a group's rows against
// each other on the same cell, many rounds: DELETE of the group, DELETE of
// either member, DELETE of a member's node (409 while it holds the member,
// 204 once released), removing a member node's instance_uuid (releases the
// member), a group PATCH, and each against itself. Nothing may answer 5xx, PostgreSQL may detect no deadlock, and
// the invariants (dbtest.Broken: a group active with count members, none
// in error) hold after every round.
func TestGroupRaceMatrix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t)
	pool, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 10, ApplicationName: "groupsrace"})
	require.NoError(t, err)
	e := echo.New()
	e.HTTPErrorHandler = web.IronicErrorHandler
	v1 := e.Group("/v1", web.IronicVersion())
	node.NewHandler(node.NewStore(pool), node.Deallocator{}, node.HandlerOptions{}).Register(v1)
	allocation.NewHandler(allocation.NewStore(pool), allocation.HandlerOptions{}).Register(v1)
	allocgroup.NewHandler(pool, allocgroup.HandlerOptions{}).Register(v1)
	srv := httptest.NewServer(e)
	base := cell{apiURLs: []string{srv.URL}}

	ops := []struct {
		name string
		run  func(c groupCell) int
	}{
		{"delete group", func(c groupCell) int {
			return call(ctx, &base, http.MethodDelete, "/v1/allocation_groups/"+c.group.String(), "")
		}},
		{"delete member", func(c groupCell) int {
			return call(ctx, &base, http.MethodDelete, "/v1/allocations/"+c.m0.String(), "")
		}},
		{"delete other member", func(c groupCell) int {
			return call(ctx, &base, http.MethodDelete, "/v1/allocations/"+c.m1.String(), "")
		}},
		{"delete member's node", func(c groupCell) int {
			return call(ctx, &base, http.MethodDelete, "/v1/nodes/"+c.n1.String(), "")
		}},
		{"remove member's instance_uuid", func(c groupCell) int {
			return call(ctx, &base, http.MethodPatch, "/v1/nodes/"+c.n0.String(), `[{"op": "remove", "path": "/instance_uuid"}]`)
		}},
		{"patch group", func(c groupCell) int {
			return call(ctx, &base, http.MethodPatch, "/v1/allocation_groups/"+c.group.String(),
				`[{"op":"add","path":"/extra/race","value":"x"}]`)
		}},
	}
	before := deadlocks(t, url, false)
	statuses := map[string]map[int]int{}
	var mu sync.Mutex
	const rounds = 15
	pairs := 0
	for i := range ops {
		for j := i; j < len(ops); j++ {
			pairs++
			for range rounds {
				c := newGroupCell(t, ctx, pool)
				var wg sync.WaitGroup
				for _, op := range []int{i, j} {
					wg.Go(func() {
						s := ops[op].run(c)
						mu.Lock()
						if statuses[ops[op].name] == nil {
							statuses[ops[op].name] = map[int]int{}
						}
						statuses[ops[op].name][s]++
						mu.Unlock()
					})
				}
				wg.Wait()
				require.Empty(t, dbtest.Broken(t, pool), "after %s vs %s", ops[i].name, ops[j].name)
			}
		}
	}
	srv.Close()
	pool.Close()
	after := deadlocks(t, url, true)
	for name, st := range statuses {
		for s := range st {
			require.Less(t, s, 500, "%s answered %d", name, s)
		}
	}
	require.Equal(t, before, after, "PostgreSQL detected deadlocks")
	t.Logf("group race matrix: %d pairs x %d rounds; deadlocks %d -> %d; statuses %v", pairs, rounds, before, after,
		fmt.Sprint(statuses))
}
