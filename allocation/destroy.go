package allocation

import (
	"context"
	"fmt"

	"github.com/metalloc/metalloc/node"
)

// Deletions of allocations are batched (batcher): concurrent DELETEs share
// one DestroyAllocations statement and one commit.
const (
	// maxDestroyStatements is how many delete batches of one API process
	// run at a time.
	maxDestroyStatements = 2
	// maxDestroyBatch is the most allocations one statement deletes.
	maxDestroyBatch = 64
)

// destroyReq is one queued deletion: the allocation and the node an
// unlocked read found it on, then the outcome.
type destroyReq struct {
	id     int64
	nodeID *int64
	out    DestroyAllocationRow
	err    error
}

// Destroy deallocates allocation id, which an unlocked read found on node
// nodeID (nil: none), as DestroyAllocation (metalloc_destroy_allocation)
// does, sharing a statement and a commit with concurrent calls. The
// outcome is DestroyAllocation's: 'deleted', 'gone', 'moved' (read again
// and retry) or 'blocked' (with the node's state for the message).
func (s *Store) Destroy(ctx context.Context, id int64, nodeID *int64) (DestroyAllocationRow, error) {
	r := &destroyReq{id: id, nodeID: nodeID}
	s.destroys.do(ctx, r)
	return r.out, r.err
}

// destroyBatch runs batch as one DestroyAllocations statement (one
// DestroyAllocation for a batch of one). When the statement fails, each
// deletion runs alone, so that one bad row fails only its own request.
func (s *Store) destroyBatch(ctx context.Context, batch []*destroyReq) {
	one := func(r *destroyReq) {
		r.out, r.err = s.q.DestroyAllocation(ctx, DestroyAllocationParams{ID: r.id, NodeID: r.nodeID, UpdateAllowed: node.UpdateAllowedStates})
	}
	if len(batch) == 1 {
		one(batch[0])
		return
	}
	p := DestroyAllocationsParams{UpdateAllowed: node.UpdateAllowedStates}
	for _, r := range batch {
		p.Ids = append(p.Ids, r.id)
		p.NodeIds = append(p.NodeIds, deref(r.nodeID))
	}
	rows, err := s.q.DestroyAllocations(ctx, p)
	if err == nil && len(rows) != len(batch) {
		err = fmt.Errorf("destroying allocations: %d outcomes for %d", len(rows), len(batch))
	}
	if err != nil {
		if ctx.Err() != nil {
			for _, r := range batch {
				r.err = err
			}
			return
		}
		for _, r := range batch {
			one(r)
		}
		return
	}
	for _, row := range rows {
		r := batch[row.Ord-1]
		r.out = DestroyAllocationRow{Outcome: row.Outcome}
		if row.Outcome == "blocked" {
			r.out.NodeUuid, r.out.ProvisionState, r.out.Maintenance = &row.NodeUuid, &row.ProvisionState, &row.Maintenance
			if row.TargetProvisionState != "" {
				r.out.TargetProvisionState = &row.TargetProvisionState
			}
		}
	}
}
