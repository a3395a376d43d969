package allocation

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
)

// TestDeleteBatched races many DELETE /v1/allocations, so that they share
// batch statements: active allocations on available nodes, allocating
// ones without a node, one on a deployed node (409, kept), one on a node
// in maintenance (deleted) and one deleted twice at once (one 204, one
// 404). Every request gets the answer it would get alone, every node the
// deleted allocations held is free again, and nothing else changed.
func TestDeleteBatched(t *testing.T) {
	t.Parallel()
	a := setupAPI(t)
	ctx := context.Background()
	const active, allocating = 60, 30
	var targets []uuid.UUID
	for i := range active {
		nid, _ := dbtest.Node(t, a.pool, dbtest.NodeSpec{Name: fmt.Sprintf("n%d", i), ResourceClass: "gold"})
		_, u := dbtest.Allocation(t, a.pool, dbtest.AllocationSpec{Node: nid})
		targets = append(targets, u)
	}
	for range allocating {
		_, u := dbtest.Allocation(t, a.pool, dbtest.AllocationSpec{})
		targets = append(targets, u)
	}
	deployed, _ := dbtest.Node(t, a.pool, dbtest.NodeSpec{Name: "deployed", ResourceClass: "gold"})
	_, deployedAlloc := dbtest.Allocation(t, a.pool, dbtest.AllocationSpec{Node: deployed})
	maint, _ := dbtest.Node(t, a.pool, dbtest.NodeSpec{Name: "maint", ResourceClass: "gold"})
	_, maintAlloc := dbtest.Allocation(t, a.pool, dbtest.AllocationSpec{Node: maint})
	_, err := a.pool.Exec(ctx, `UPDATE nodes SET provision_state = 'active' WHERE id = $1`, deployed)
	require.NoError(t, err)
	_, err = a.pool.Exec(ctx, `UPDATE nodes SET provision_state = 'active', maintenance = true WHERE id = $1`, maint)
	require.NoError(t, err)
	twice := targets[0]
	reqs := append([]uuid.UUID{twice, deployedAlloc, maintAlloc}, targets...)

	statuses := make([]int, len(reqs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, u := range reqs {
		wg.Go(func() {
			<-start
			statuses[i], _, _ = a.call(http.MethodDelete, "/v1/allocations/"+u.String(), "1.52", nil)
		})
	}
	close(start)
	wg.Wait()

	require.ElementsMatch(t, []int{http.StatusNoContent, http.StatusNotFound}, []int{statuses[0], statuses[3]},
		"the allocation deleted twice at once")
	require.Equal(t, http.StatusConflict, statuses[1], "allocation of a deployed node")
	require.Equal(t, http.StatusNoContent, statuses[2], "allocation of a node in maintenance")
	for i := 4; i < len(reqs); i++ {
		require.Equal(t, http.StatusNoContent, statuses[i], "DELETE %d", i)
	}
	require.Equal(t, 1, dbtest.Count(t, a.pool, `SELECT count(*) FROM allocations`))
	require.Equal(t, 1, dbtest.Count(t, a.pool, `SELECT count(*) FROM allocations WHERE uuid = $1`, deployedAlloc))
	require.Equal(t, 1, dbtest.Count(t, a.pool, `SELECT count(*) FROM nodes WHERE instance_uuid IS NOT NULL OR allocation_id IS NOT NULL`))
}
