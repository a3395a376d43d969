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
	out    DestroyAllocationsRow
	err    error
}

// Destroy deallocates allocation id, which an unlocked read found on node
// nodeID (nil: none), sharing a statement and a commit with concurrent
// calls (DestroyAllocations). The outcome is 'deleted', 'gone', 'moved'
// (read again and retry) or 'blocked' (with the node's state for the
// message).
func (s *Store) Destroy(ctx context.Context, id int64, nodeID *int64) (DestroyAllocationsRow, error) {
	r := &destroyReq{id: id, nodeID: nodeID}
	s.destroys.do(ctx, r)
	return r.out, r.err
}

// destroyBatch runs batch as one DestroyAllocations statement. When the
// statement fails for another reason than the end of ctx, each deletion
// runs alone, so that one bad row fails only its own request.
func (s *Store) destroyBatch(ctx context.Context, batch []*destroyReq) {
	run := func(rs []*destroyReq) error {
		p := DestroyAllocationsParams{UpdateAllowed: node.UpdateAllowedStates}
		for _, r := range rs {
			p.Ids = append(p.Ids, r.id)
			p.NodeIds = append(p.NodeIds, deref(r.nodeID))
		}
		rows, err := s.q.DestroyAllocations(ctx, p)
		if err == nil && len(rows) != len(rs) {
			err = fmt.Errorf("destroying allocations: %d outcomes for %d", len(rows), len(rs))
		}
		if err != nil {
			return err
		}
		for _, row := range rows {
			rs[row.Ord-1].out = row
		}
		return nil
	}
	err := run(batch)
	if err == nil {
		return
	}
	for _, r := range batch {
		if len(batch) == 1 || ctx.Err() != nil {
			r.err = err
		} else {
			r.err = run([]*destroyReq{r})
		}
	}
}
