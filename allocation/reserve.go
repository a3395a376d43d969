package allocation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
)

// Claimed is an allocation a conductor owns and must process.
type Claimed struct {
	ID             int64
	UUID           uuid.UUID
	Name           *string
	ResourceClass  string
	CandidateNodes []uuid.UUID
	Owner          *string
	Traits         []string
	CreatedAt      time.Time
}

// Outcome is how processing one allocation ended.
type Outcome int

// Outcomes of Allocator.Process.
const (
	// Reserved: the allocation is active on a node.
	Reserved Outcome = iota
	// Failed: the allocation is in error with a last_error.
	Failed
	// Lost: the allocation is no longer this conductor's (taken over or
	// deleted); nothing was written.
	Lost
)

func (o Outcome) String() string {
	return [...]string{"reserved", "failed", "lost"}[o]
}

// Allocator runs the database-backend reservation for claimed allocations.
type Allocator struct {
	pool *pgxpool.Pool
	q    *Queries
	log  *zap.Logger
	// LockedRetries bounds how often Process retries when every fitting node
	// is momentarily locked by concurrent reservations (default 20).
	LockedRetries int
	// LockedBackoff is the first wait between such retries, doubled each time
	// up to 16x (default 5 ms).
	LockedBackoff time.Duration
}

// NewAllocator returns an Allocator on pool.
func NewAllocator(pool *pgxpool.Pool, log *zap.Logger) *Allocator {
	return &Allocator{pool: pool, q: New(pool), log: log, LockedRetries: 20, LockedBackoff: 5 * time.Millisecond}
}

// Claim takes up to batch unowned allocating rows for conductor me (FOR
// UPDATE SKIP LOCKED: concurrent conductors never get the same row and never
// wait for each other).
func (a *Allocator) Claim(ctx context.Context, me int64, batch int) ([]Claimed, error) {
	rows, err := a.q.ClaimAllocations(ctx, ClaimAllocationsParams{Me: me, Batch: int32(batch)})
	if err != nil {
		return nil, fmt.Errorf("claiming allocations: %w", err)
	}
	out := make([]Claimed, len(rows))
	for i, r := range rows {
		out[i] = Claimed{r.ID, r.Uuid, r.Name, r.ResourceClass, r.CandidateNodes, r.Owner, r.Traits, r.CreatedAt}
	}
	return out, nil
}

// Owned returns conductor me's unfinished allocations (resumed at start-up
// and after a takeover).
func (a *Allocator) Owned(ctx context.Context, me int64) ([]Claimed, error) {
	rows, err := a.q.OwnedAllocating(ctx, me)
	if err != nil {
		return nil, fmt.Errorf("listing owned allocations: %w", err)
	}
	out := make([]Claimed, len(rows))
	for i, r := range rows {
		out[i] = Claimed{r.ID, r.Uuid, r.Name, r.ResourceClass, r.CandidateNodes, r.Owner, r.Traits, r.CreatedAt}
	}
	return out, nil
}

// Process reserves a node for c on behalf of conductor me, or moves c to error
// with a last_error a person can act on. Each attempt is one statement
// (Reserve): a random free fitting node is locked without waiting, re-checked
// under the lock, and reserved together with the allocation's activation,
// which is guarded by conductor_affinity = me. When all fitting nodes are
// momentarily locked by others it backs off and tries the next one. It
// returns an error only when the database is unreachable or ctx ends; the row
// then stays allocating and owned, to be resumed.
func (a *Allocator) Process(ctx context.Context, me int64, c Claimed) (Outcome, error) {
	log := a.log.With(zap.Stringer("allocation", c.UUID))
	traits := c.Traits
	if traits == nil {
		traits = []string{}
	}
	var cands []uuid.UUID
	if len(c.CandidateNodes) > 0 {
		cands = c.CandidateNodes
	}
	backoff := a.LockedBackoff
	var lastFit int64
	for attempt := 0; ; attempt++ {
		r, err := a.q.Reserve(ctx, ReserveParams{
			ResourceClass: c.ResourceClass,
			Candidates:    cands,
			Owner:         c.Owner,
			Traits:        traits,
			Name:          c.Name,
			AllocationID:  c.ID,
			Me:            me,
		})
		switch {
		case err == nil && r.AllocationID == nil:
			log.Info("allocation no longer owned by this conductor; dropping it")
			return Lost, nil
		case err == nil:
			log.Debug("reserved node", zap.Stringer("node", r.NodeUuid), zap.Int("attempt", attempt))
			return Reserved, nil
		case errors.Is(err, pgx.ErrNoRows):
			stats, serr := a.q.FitStats(ctx, FitStatsParams{
				ResourceClass: c.ResourceClass, Candidates: cands, Owner: c.Owner, Traits: traits,
			})
			if serr != nil {
				return a.transient(ctx, c, serr)
			}
			if stats.Fitting == 0 {
				return a.fail(ctx, me, c, "no node fits: "+describe(c, stats))
			}
			lastFit = stats.Fitting
		case db.IsUniqueViolation(err, "nodes_instance_uuid_key"):
			return a.fail(ctx, me, c, fmt.Sprintf(
				"instance %s is already associated with another node (its uuid is some node's instance_uuid)", c.UUID))
		case db.IsUnavailable(err) || ctx.Err() != nil:
			return a.transient(ctx, c, err)
		default:
			// A serialization or integrity race with a concurrent writer on
			// the chosen node: the next attempt picks again.
			log.Warn("reservation attempt failed; retrying", zap.Error(err))
		}
		if attempt >= a.LockedRetries {
			return a.fail(ctx, me, c, fmt.Sprintf(
				"could not reserve any of %d suitable nodes: they stayed locked by concurrent reservations or updates", lastFit))
		}
		select {
		case <-ctx.Done():
			return a.transient(ctx, c, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, a.LockedBackoff*16)
	}
}

func (a *Allocator) transient(_ context.Context, c Claimed, err error) (Outcome, error) {
	return Lost, fmt.Errorf("processing allocation %s: %w", c.UUID, err)
}

// fail moves c to error, guarded by conductor_affinity = me.
func (a *Allocator) fail(ctx context.Context, me int64, c Claimed, reason string) (Outcome, error) {
	msg := fmt.Sprintf("Failed to process allocation %s: %s.", c.UUID, reason)
	n, err := a.q.FailAllocation(ctx, FailAllocationParams{LastError: &msg, ID: c.ID, Me: me})
	if err != nil {
		return a.transient(ctx, c, err)
	}
	if n == 0 {
		return Lost, nil
	}
	a.log.Info("allocation failed", zap.Stringer("allocation", c.UUID), zap.String("last_error", msg))
	return Failed, nil
}

// describe says how many nodes each filter left, in order.
func describe(c Claimed, s FitStatsRow) string {
	parts := []string{
		fmt.Sprintf("%d of resource class %s", s.WithClass, c.ResourceClass),
		fmt.Sprintf("%d available", s.Available),
	}
	if len(c.CandidateNodes) > 0 || c.Owner != nil {
		var what []string
		if len(c.CandidateNodes) > 0 {
			what = append(what, fmt.Sprintf("among the %d candidate_nodes", len(c.CandidateNodes)))
		}
		if c.Owner != nil {
			what = append(what, fmt.Sprintf("owned by or leased to %s", *c.Owner))
		}
		parts = append(parts, fmt.Sprintf("%d %s", s.Candidates, strings.Join(what, " and ")))
	}
	if len(c.Traits) > 0 {
		parts = append(parts, fmt.Sprintf("%d with traits %s", s.Fitting, strings.Join(c.Traits, ", ")))
	}
	return strings.Join(parts, ", ")
}
