package allocation

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/web"
)

// Inserts of new allocations are batched (batcher): concurrent POSTs
// share one CreateAllocations statement and one commit.
const (
	// maxInsertStatements is how many insert batches of one API process
	// run at a time.
	maxInsertStatements = 2
	// maxInsertBatch is the most rows one statement inserts.
	maxInsertBatch = 64
)

// insertReq is one queued insert: its parameters, then its outcome.
type insertReq struct {
	p   CreateAllocationParams
	row CreateAllocationRow
	err error
}

// batchable says whether p can share CreateAllocations: a new allocating
// row, not a backfill, without candidate nodes (a list per row, which the
// batch's arrays cannot carry).
func batchable(p CreateAllocationParams) bool {
	return p.State == StateAllocating && p.NodeID == nil && len(p.CandidateNodes) == 0
}

// Insert inserts allocation p as insertAllocation does, with the same
// outcomes and errors, sharing a statement and a commit with concurrent
// calls (batcher) when p is batchable.
func (s *Store) Insert(ctx context.Context, p CreateAllocationParams) (CreateAllocationRow, error) {
	if !batchable(p) {
		return insertAllocation(ctx, s.q, p, nil)
	}
	r := &insertReq{p: p}
	s.inserts.do(ctx, r)
	return r.row, r.err
}

// insertBatch inserts batch with one CreateAllocations statement and
// records each request's outcome. A request left out (a node holds its
// uuid), or every request of a statement that failed for any reason but
// an outage or the end of ctx (a name or uuid taken, by one of them or by
// anyone; a value the database refuses), goes through insertAllocation
// alone, which says which and why.
func (s *Store) insertBatch(ctx context.Context, batch []*insertReq) {
	if len(batch) == 1 {
		r := batch[0]
		r.row, r.err = insertAllocation(ctx, s.q, r.p, nil)
		return
	}
	var a CreateAllocationsParams
	for _, r := range batch {
		p := r.p
		a.Uuids = append(a.Uuids, p.Uuid)
		a.HasNames = append(a.HasNames, p.Name != nil)
		a.Names = append(a.Names, deref(p.Name))
		a.ResourceClasses = append(a.ResourceClasses, p.ResourceClass)
		a.Extras = append(a.Extras, string(p.Extra))
		a.HasOwners = append(a.HasOwners, p.Owner != nil)
		a.Owners = append(a.Owners, deref(p.Owner))
		for _, t := range p.Traits {
			a.TraitUuids = append(a.TraitUuids, p.Uuid)
			a.Traits = append(a.Traits, t)
		}
	}
	rows, err := s.q.CreateAllocations(ctx, a)
	if err != nil && (ctx.Err() != nil || db.IsUnavailable(err)) {
		// Nothing would go better alone.
		for _, r := range batch {
			r.err = fmt.Errorf("creating allocation: %w", err)
		}
		return
	}
	// Any other failure (a constraint, a value the database refuses) may
	// be one request's: each goes alone, and gets its own answer.
	inserted := make(map[uuid.UUID]CreateAllocationRow, len(rows))
	for _, row := range rows {
		inserted[row.Uuid] = CreateAllocationRow(row)
	}
	for _, r := range batch {
		if row, ok := inserted[r.p.Uuid]; ok {
			r.row = row
			continue
		}
		r.row, r.err = insertAllocation(ctx, s.q, r.p, nil)
	}
}

// insertAllocation inserts the allocation p (CreateAllocation) and says
// why it could not: a name or uuid already taken, or p.Uuid already the
// instance_uuid of a node other than p.NodeID (409s with Ironic's
// messages; the "other node" named is backfill, the node being backfilled,
// or else the node holding the uuid).
func insertAllocation(ctx context.Context, q *Queries, p CreateAllocationParams, backfill *uuid.UUID) (CreateAllocationRow, error) {
	for attempt := 0; ; attempt++ {
		row, err := q.CreateAllocation(ctx, p)
		if !errors.Is(err, pgx.ErrNoRows) {
			return row, createError(err, p)
		}
		// A node holds the uuid as its instance: name it.
		holder, err := q.NodeHoldingInstance(ctx, &p.Uuid)
		if err == nil && backfill != nil {
			holder = *backfill
		}
		switch {
		case err == nil:
			return row, web.Conflict("Instance %s is already associated with a node, it cannot be associated with this other node %s", p.Uuid, holder)
		case !errors.Is(err, pgx.ErrNoRows):
			return row, err
		case attempt > 0:
			return row, web.Conflict("Instance %s is being associated with a node concurrently; try again.", p.Uuid)
		}
		// Released in between: insert again.
	}
}
