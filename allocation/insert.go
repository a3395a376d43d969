package allocation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/web"
)

// Batched inserts of new allocations. Every POST /v1/allocations used to
// insert its row in a transaction of its own, and every such transaction
// notifies (the conductors, the API processes' hubs): PostgreSQL
// serializes the commits of notifying transactions on one lock, and with
// dozens of clients the inserts queued there. Concurrent POSTs now share
// a statement (CreateAllocations) and a commit: while a statement runs, the
// requests arriving meanwhile queue and go together in the next one, so
// one client alone waits for nothing and many share the cost (the way
// group commit works).
const (
	// maxInsertStatements is how many batch statements of one API process
	// run at a time.
	maxInsertStatements = 2
	// maxInsertBatch is the most rows one statement inserts.
	maxInsertBatch = 64
)

// inserter queues the batchable inserts of one Store.
type inserter struct {
	mu      sync.Mutex
	pending []*insertReq
	running int // leaders running a statement, at most maxInsertStatements
}

// insertReq is one queued insert: its parameters, then its outcome.
type insertReq struct {
	p    CreateAllocationParams
	wake chan struct{} // capacity 1: done or lead was set
	// Set under inserter.mu before wake is signalled:
	done bool // row and err hold the outcome
	lead bool // the request must lead the next batch
	row  CreateAllocationRow
	err  error
}

// batchable says whether p can share CreateAllocations: a new allocating
// row, not a backfill, without candidate nodes (a list per row, which the
// batch's arrays cannot carry).
func batchable(p CreateAllocationParams) bool {
	return p.State == StateAllocating && p.NodeID == nil && len(p.CandidateNodes) == 0
}

// Insert inserts allocation p as insertAllocation does, with the same
// outcomes and errors, sharing a statement and a commit with concurrent
// calls when p is batchable. The statement runs under the context of the
// call that leads its batch, without its cancellation (its deadline
// stays): a client that goes away does not fail the others' inserts.
func (s *Store) Insert(ctx context.Context, p CreateAllocationParams) (CreateAllocationRow, error) {
	if !batchable(p) {
		return insertAllocation(ctx, s.q, p, nil)
	}
	in := &s.inserts
	r := &insertReq{p: p, wake: make(chan struct{}, 1)}
	in.mu.Lock()
	in.pending = append(in.pending, r)
	lead := in.running < maxInsertStatements
	if lead {
		in.running++
	}
	in.mu.Unlock()
	for {
		if lead {
			s.leadInsert(ctx)
		}
		in.mu.Lock()
		for !r.done && !r.lead {
			in.mu.Unlock()
			<-r.wake
			in.mu.Lock()
		}
		done := r.done
		lead, r.lead = r.lead, false
		in.mu.Unlock()
		if done {
			return r.row, r.err
		}
	}
}

// leadInsert runs one batch: the oldest pending requests, up to
// maxInsertBatch. Then it hands the lead to the next pending request, or
// gives its statement slot back when none is left.
func (s *Store) leadInsert(ctx context.Context) {
	in := &s.inserts
	in.mu.Lock()
	n := min(len(in.pending), maxInsertBatch)
	batch := slices.Clone(in.pending[:n])
	in.pending = slices.Delete(in.pending, 0, n)
	in.mu.Unlock()

	sctx := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		sctx, cancel = context.WithDeadline(sctx, dl)
		defer cancel()
	}
	s.insertBatch(sctx, batch)

	in.mu.Lock()
	for _, r := range batch {
		r.done = true
		signal(r.wake)
	}
	if len(in.pending) > 0 {
		next := in.pending[0]
		next.lead = true
		signal(next.wake)
	} else {
		in.running--
	}
	in.mu.Unlock()
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// insertBatch inserts batch with one CreateAllocations statement and
// records each request's outcome. A request left out (a node holds its
// uuid) or a statement that failed on a constraint (a name or uuid taken,
// by one of them or by anyone) goes through insertAllocation alone, which
// says which and why; any other error is every request's.
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
	if err != nil && !db.IsIntegrityError(err) {
		for _, r := range batch {
			r.err = fmt.Errorf("creating allocation: %w", err)
		}
		return
	}
	for _, r := range batch {
		i := slices.IndexFunc(rows, func(row CreateAllocationsRow) bool { return row.Uuid == r.p.Uuid })
		if i >= 0 {
			r.row = CreateAllocationRow(rows[i])
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
