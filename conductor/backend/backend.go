package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
)

// Backend is how a conductor gets a node for each allocation it owns:
// Database (reserve straight in PostgreSQL) or Placement (claim through the
// Placement API with Selection objects). The conductor's claim loop knows
// nothing else of them.
type Backend interface {
	// Claim takes up to n unowned allocating rows for conductor me. It
	// returns the rows it already reserved (only ID, UUID and CreatedAt need
	// be set) and the claimed rows that still need Process. An error
	// wrapping ErrClaimedUnread means rows were claimed but not read back:
	// reserved is valid, and the rest must be resumed (the conductor's
	// Rows.Owned).
	Claim(ctx context.Context, me int64, n int) (reserved, rest []Claimed, err error)
	// Process reserves a node for owned row c or moves it to error: Reserved,
	// Failed, Lost (no longer me's, nothing written), or Waiting: every
	// node that fits c is locked by others right now, nothing was written,
	// and c.Wait says when to call Process again with c (Wait). An error
	// only when the database or Placement is unreachable or ctx ends, the
	// row staying owned.
	Process(ctx context.Context, me int64, c *Claimed) (Outcome, error)
}

// GroupBackend places the allocation groups a conductor owns:
// GroupReserver, in the database alone (the database backend) or also in
// Placement (the placement backend: GroupReserver.Placement set).
type GroupBackend interface {
	// Process has the contract of GroupReserver.Process.
	Process(ctx context.Context, me int64, g ClaimedGroup) (Outcome, error)
}

// Claimed is an allocation a conductor owns and must process: what it asks
// for (the view allocation_requests).
type Claimed struct {
	ID             int64
	UUID           uuid.UUID
	Name           *string
	ResourceClass  string
	CandidateNodes []uuid.UUID
	Owner          *string
	Traits         []string
	CreatedAt      time.Time
	// Wait is the row's wait for a locked node, kept by Process between
	// the calls that return Waiting.
	Wait Wait
}

// normalize gives c the shapes the statements take: no traits is an empty
// list, no candidate_nodes is NULL.
func (c *Claimed) normalize() {
	if c.Traits == nil {
		c.Traits = []string{}
	}
	if len(c.CandidateNodes) == 0 {
		c.CandidateNodes = nil
	}
}

// ClaimedGroup is an allocation group a conductor owns and must process.
type ClaimedGroup struct {
	ID             int64
	UUID           uuid.UUID
	Count          int
	ResourceClass  string
	Traits         []string
	CandidateNodes []uuid.UUID
	Owner          *string
	Rule           string
	RuleLevel      *string
	Domain         []string
	CreatedAt      time.Time
}

// Outcome is how processing one allocation or group ended.
type Outcome int

// Outcomes of Backend.Process and GroupBackend.Process.
const (
	// Reserved: the allocation is active on a node.
	Reserved Outcome = iota
	// Failed: the allocation is in error with a last_error.
	Failed
	// Lost: the allocation is no longer this conductor's (taken over or
	// deleted); nothing was written.
	Lost
	// Waiting: every node that fits the allocation is locked by others
	// right now; nothing was written. Process it again after its
	// Claimed.Wait.Retry (Backend.Process only).
	Waiting
)

func (o Outcome) String() string {
	return [...]string{"reserved", "failed", "lost", "waiting"}[o]
}

// ErrClaimedUnread is wrapped by a claim's error when rows were claimed but
// could not be read back (the database went away): they stay allocating
// and owned by the caller, who must resume them.
var ErrClaimedUnread = errors.New("claimed allocations left unread")

// Read returns those of the allocations ids that are still allocating and
// owned by conductor me, oldest first, as the backends take them (the
// conductor's resume and takeover read the rows they own with it).
func Read(ctx context.Context, pool *pgxpool.Pool, me int64, ids []int64) ([]Claimed, error) {
	return readClaimed(ctx, New(pool), me, ids)
}

func readClaimed(ctx context.Context, q *Queries, me int64, ids []int64) ([]Claimed, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := q.ClaimedAllocating(ctx, ClaimedAllocatingParams{Ids: ids, Me: me})
	if err != nil {
		return nil, err
	}
	out := make([]Claimed, len(rows))
	for i, r := range rows {
		out[i] = claimedOf(r.AllocationRequest)
	}
	return out, nil
}

// claimedOf is a Claimed from its row of allocation_requests.
func claimedOf(r AllocationRequest) Claimed {
	return Claimed{ID: r.ID, UUID: r.Uuid, Name: r.Name, ResourceClass: r.ResourceClass,
		CandidateNodes: r.CandidateNodes, Owner: r.Owner, Traits: r.Traits, CreatedAt: r.CreatedAt}
}

// ReadGroups returns those of the allocation groups ids that are still
// allocating and owned by conductor me, oldest first (the conductor's
// claim, resume and takeover of groups).
func ReadGroups(ctx context.Context, pool *pgxpool.Pool, me int64, ids []int64) ([]ClaimedGroup, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	gs, err := New(pool).ClaimedGroups(ctx, ClaimedGroupsParams{Ids: ids, Me: me})
	if err != nil {
		return nil, err
	}
	out := make([]ClaimedGroup, len(gs))
	for i, g := range gs {
		out[i] = ClaimedGroup{ID: g.ID, UUID: g.Uuid, Count: int(g.Count), ResourceClass: g.ResourceClass,
			Traits: g.Traits, CandidateNodes: g.CandidateNodes, Owner: g.Owner, Rule: g.Rule, RuleLevel: g.RuleLevel,
			Domain: g.Domain, CreatedAt: g.CreatedAt}
	}
	return out, nil
}

// claimOnly takes up to batch unowned allocating rows for conductor me,
// oldest first (FOR UPDATE SKIP LOCKED: concurrent conductors never get the
// same row and never wait for each other), without reserving: the
// placement backend's claim, and either backend's when its fast path
// failed as a whole.
func claimOnly(ctx context.Context, q *Queries, me int64, batch int) ([]Claimed, error) {
	rows, err := q.ClaimAllocations(ctx, ClaimAllocationsParams{Me: me, Batch: int32(batch)})
	if err != nil {
		return nil, fmt.Errorf("claiming allocations: %w", err)
	}
	out := make([]Claimed, len(rows))
	for i, r := range rows {
		out[i] = claimedOf(r.AllocationRequest)
	}
	return out, nil
}

// fastPathFailed reports whether a fast path's error calls for claiming
// the batch only (claimOnly) and sending every row down the slow path: any
// error but an outage, the end of ctx, or rows claimed but unread. A
// constraint race on one row rolls the whole batch back; the slow path
// fails the offending row with a reason instead of letting it block the
// batch at every attempt.
func fastPathFailed(ctx context.Context, err error) bool {
	return err != nil && !errors.Is(err, ErrClaimedUnread) && !db.IsUnavailable(err) && ctx.Err() == nil
}

// Claim is the database backend's claim (Backend): the fast path
// (ClaimReserve) and, when it fails as a whole for another reason than an
// outage, the batch claimed only, every row left for Process.
func (a *Database) Claim(ctx context.Context, me int64, n int) (reserved, rest []Claimed, err error) {
	reserved, rest, err = a.ClaimReserve(ctx, me, n)
	if !fastPathFailed(ctx, err) {
		return reserved, rest, err
	}
	a.log.Warn("batch reservation failed; claiming the batch for the slow path", zap.Error(err))
	rest, err = claimOnly(ctx, a.q, me, n)
	return nil, rest, err
}

// Claim is the placement backend's claim (Backend). With metalloc-placement
// on the same database (mode local) one transaction claims, reserves and
// writes the Placement allocations (ClaimReserveLocal), as the database
// backend does. Otherwise, and for the rows that fast path left
// (candidate_nodes, nothing free at that moment, a class or trait
// Placement does not know), it reserves through Placement with one
// candidates query per kind of request (ClaimBatch: selections in-process
// in one transaction in mode local, concurrent HTTP claims otherwise); the
// rows still left go through Process. A fast path that fails as a whole for
// another reason than an outage falls back to claiming the batch only, for
// ClaimBatch.
func (p *Placement) Claim(ctx context.Context, me int64, n int) (reserved, rest []Claimed, err error) {
	var rows []Claimed
	fast := p.Local(ctx)
	if fast {
		reserved, rows, err = p.ClaimReserveLocal(ctx, me, n)
		switch {
		case fastPathFailed(ctx, err):
			p.log.Warn("batch reservation through local Placement failed; claiming the batch for the slow path", zap.Error(err))
			fast = false
		case err != nil:
			return reserved, rows, err
		}
	}
	if !fast {
		rows, err = claimOnly(ctx, p.q, me, n)
		if err != nil {
			return nil, rows, err
		}
	}
	if len(rows) == 0 {
		return reserved, nil, nil
	}
	more, rest := p.ClaimBatch(ctx, me, rows)
	return append(reserved, more...), rest, nil
}
