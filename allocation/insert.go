package allocation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
// calls (batcher) when p is batchable. p.Uuid must be set.
//
// An insert whose outcome is unknown (the connection broke after the
// statement was sent: a database restart or a network failure while it
// committed) is settled by looking the uuid up once the database answers
// again, within ctx (confirmInsert): a row that is there is this insert's
// (p.Uuid is new, or the client's own, and a uuid already taken fails the
// insert itself), and is returned as inserted. So an error means nothing
// was stored, unless ctx ended before the lookup could tell.
func (s *Store) Insert(ctx context.Context, p CreateAllocationParams) (CreateAllocationRow, error) {
	var row CreateAllocationRow
	var err error
	if !batchable(p) {
		row, err = insertAllocation(ctx, s.q, p, nil)
	} else {
		r := &insertReq{p: p}
		s.inserts.do(ctx, r)
		row, err = r.row, r.err
	}
	if err != nil && maybeCommitted(err) {
		if found, ok := s.confirmInsert(ctx, p.Uuid); ok {
			return found, nil
		}
	}
	return row, err
}

// maybeCommitted reports whether err leaves a statement's outcome unknown:
// the connection failed after the statement was (or may have been) sent.
// A connection that could not be had, or that failed before anything was
// sent (pgconn.SafeToRetry), stored nothing.
func maybeCommitted(err error) bool {
	var connErr *pgconn.ConnectError
	return db.IsUnavailable(err) && !pgconn.SafeToRetry(err) && !errors.As(err, &connErr) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// confirmInsertPause bounds the pause between two lookups of confirmInsert
// while the database is unavailable.
const confirmInsertPause = time.Second

// confirmInsert looks allocation u up until the database answers or ctx
// ends: ok with the row when it is there; not ok when it is not there, or
// the answer did not come in time.
func (s *Store) confirmInsert(ctx context.Context, u uuid.UUID) (CreateAllocationRow, bool) {
	pause := 50 * time.Millisecond
	for {
		r, err := s.q.GetAllocationByUUID(ctx, u)
		switch {
		case err == nil:
			return createdRowOf(r.Allocation), true
		case !db.IsUnavailable(err) || ctx.Err() != nil:
			return CreateAllocationRow{}, false
		}
		select {
		case <-ctx.Done():
			return CreateAllocationRow{}, false
		case <-time.After(pause):
		}
		pause = min(2*pause, confirmInsertPause)
	}
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
// why it could not: a name or uuid already taken (409s with Ironic's
// messages, AllocationDuplicateName and AllocationAlreadyExists, whatever
// the state of the allocation holding the uuid), or p.Uuid already the
// instance_uuid of a node other than p.NodeID without being an
// allocation's (an *InstanceHeldError; the "other node" named is backfill,
// the node being backfilled, or else the node holding the uuid).
func insertAllocation(ctx context.Context, q *Queries, p CreateAllocationParams, backfill *uuid.UUID) (CreateAllocationRow, error) {
	for attempt := 0; ; attempt++ {
		row, err := q.CreateAllocation(ctx, p)
		if !errors.Is(err, pgx.ErrNoRows) {
			return row, createError(err, p)
		}
		// A node holds the uuid as its instance: an active allocation's
		// (the uuid is taken, as Ironic's insert would find; the node is
		// not named: it may be another project's), or the node's alone.
		h, err := q.NodeHoldingInstance(ctx, p.Uuid)
		switch {
		case err == nil && h.Allocated:
			return row, web.Conflict("An allocation with UUID %s already exists.", p.Uuid)
		case err == nil:
			if backfill != nil {
				return row, &InstanceHeldError{Instance: p.Uuid, Holder: *backfill, Seen: true}
			}
			return row, &InstanceHeldError{Instance: p.Uuid, Holder: h.Uuid, Owner: h.Owner, Lessee: h.Lessee}
		case !errors.Is(err, pgx.ErrNoRows):
			return row, err
		case attempt > 0:
			return row, web.Conflict("Instance %s is being associated with a node concurrently; try again.", p.Uuid)
		}
		// Released in between: insert again.
	}
}

// InstanceHeldError is the 409 of an insert whose uuid node Holder already
// holds as its instance_uuid, no allocation having that uuid (set by a
// node PATCH): Ironic's InstanceAssociated, naming Holder. Seen says Holder
// is the node being backfilled, which the caller has already been allowed
// to see; otherwise Holder is the node holding the uuid and Owner and
// Lessee are its tenancy, for the handler to name it only to a caller who
// may see it (Hidden otherwise).
type InstanceHeldError struct {
	Instance, Holder uuid.UUID
	Seen             bool
	Owner, Lessee    *string
}

// Error is Ironic's message naming Holder.
func (e *InstanceHeldError) Error() string { return e.Unwrap().Error() }

// Unwrap is the 409 naming Holder, as a *web.Error.
func (e *InstanceHeldError) Unwrap() error {
	return web.Conflict("Instance %s is already associated with a node, it cannot be associated with this other node %s", e.Instance, e.Holder)
}

// Hidden is the 409 for a caller who may not see Holder: the same
// conflict, no node named.
func (e *InstanceHeldError) Hidden() *web.Error {
	return web.Conflict("Instance %s is already associated with a node.", e.Instance)
}
