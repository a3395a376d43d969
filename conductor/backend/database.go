package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
)

// Database runs the database-backend reservation for claimed allocations.
type Database struct {
	pool *pgxpool.Pool
	q    *Queries
	log  *zap.Logger
	// LockedWait bounds how long a row waits (Process returning Waiting)
	// while every fitting node is locked by concurrent reservations or
	// updates, before it moves the allocation to error (default 2s;
	// conductor.locked_node_wait).
	LockedWait time.Duration
	// LockedBackoff is the first wait between such attempts, doubled each
	// time up to 16x (default 5 ms); set it before the first Process.
	LockedBackoff time.Duration
	// locked is the kinds of request whose fitting nodes were all locked
	// at their last attempt (made from LockedBackoff at the first Process).
	locked     *lockedKinds
	lockedOnce sync.Once
}

// NewDatabase returns a Database on pool.
func NewDatabase(pool *pgxpool.Pool, log *zap.Logger) *Database {
	return &Database{pool: pool, q: New(pool), log: log, LockedWait: 2 * time.Second, LockedBackoff: 5 * time.Millisecond}
}

// ClaimReserve is the fast path: one transaction claims up to batch unowned
// allocating rows for conductor me and reserves a node for each that has an
// unlocked fitting node right now (metalloc_claim_reserve). It returns the
// reserved rows (only ID, UUID and CreatedAt set) and the claimed rows that
// still need Process (no node was free at that moment: retry, or error with
// an explanation), read in full by a second statement. On ErrClaimedUnread
// the reserved rows are valid too.
func (a *Database) ClaimReserve(ctx context.Context, me int64, batch int) (reserved []Claimed, rest []Claimed, err error) {
	rows, err := a.q.ClaimReserve(ctx, ClaimReserveParams{Me: me, Batch: int32(batch)})
	if err != nil {
		return nil, nil, fmt.Errorf("claiming and reserving: %w", err)
	}
	return splitClaimed(ctx, a.q, me, rows)
}

// splitClaimed sorts the rows a fast-path statement claimed into those it
// reserved (ID, UUID and CreatedAt) and the rest, read in full by a
// statement of its own: they may have been inserted after the claim
// statement's snapshot was taken. On ErrClaimedUnread the reserved rows
// are valid and the rest stay allocating and owned (resumed by Owned).
func splitClaimed(ctx context.Context, q *Queries, me int64, rows []ClaimReserveRow) (reserved, rest []Claimed, err error) {
	var restIDs []int64
	for _, r := range rows {
		if r.Reserved {
			reserved = append(reserved, Claimed{ID: r.ID, UUID: r.Uuid, CreatedAt: r.CreatedAt})
		} else {
			restIDs = append(restIDs, r.ID)
		}
	}
	if len(restIDs) == 0 {
		return reserved, nil, nil
	}
	rest, err = readClaimed(ctx, q, me, restIDs)
	if err != nil {
		return reserved, nil, fmt.Errorf("%w: reading claimed allocations: %w", ErrClaimedUnread, err)
	}
	return reserved, rest, nil
}

// Process reserves a node for c on behalf of conductor me, or moves c to error
// with a last_error a person can act on. It makes one attempt, one short
// transaction (reserveOnce): pick and lock a free matching node without
// waiting for nodes others hold, then activate the allocation, guarded by
// conductor_affinity = me, together with the node. When every fitting node
// is locked by others right now it returns Waiting, c.Wait saying when to
// try again (Wait): the rows of one kind of request wait for one attempt
// at a time (lockedKinds: the first waits LockedBackoff, doubled while the
// nodes stay locked, up to 16x), and a row that has waited LockedWait goes
// to error after a last attempt. It returns an error only when the
// database is unreachable or ctx ends; the row then stays allocating and
// owned, to be resumed.
func (a *Database) Process(ctx context.Context, me int64, c *Claimed) (Outcome, error) {
	log := a.log.With(zap.Stringer("allocation", c.UUID))
	c.normalize()
	a.lockedOnce.Do(func() { a.locked = newLockedKinds(a.LockedBackoff, 16*a.LockedBackoff) })
	kind, now := kindOf(c), time.Now()
	if c.Wait.Waiting() && !c.Wait.expired(now, a.LockedWait) {
		if left, fit, ok := a.locked.wait(kind, now); ok {
			return a.wait(ctx, me, c, now, fit, left)
		}
	}
	node, err := a.reserveOnce(ctx, me, *c, !c.Wait.tried)
	c.Wait.tried = true
	switch {
	case err == nil:
		a.locked.free(kind)
		log.Debug("reserved node", zap.Stringer("node", node), zap.Bool("waited", c.Wait.Waiting()))
		return Reserved, nil
	case errors.Is(err, errLost):
		log.Info("allocation no longer owned by this conductor; dropping it")
		return Lost, nil
	case errors.Is(err, errNoNode):
		stats, serr := a.q.FitStats(ctx, FitStatsParams{
			ResourceClass: c.ResourceClass, Candidates: c.CandidateNodes, Owner: c.Owner, Traits: c.Traits,
		})
		if serr != nil {
			return a.transient(ctx, *c, serr)
		}
		if stats.Fitting == 0 {
			return a.failNoFit(ctx, me, *c, stats)
		}
		return a.wait(ctx, me, c, now, stats.Fitting, a.locked.locked(kind, stats.Fitting, now))
	case db.IsUniqueViolation(err, "nodes_instance_uuid_key"):
		return a.fail(ctx, me, *c, fmt.Sprintf(
			"instance %s is already associated with another node (its uuid is some node's instance_uuid)", c.UUID))
	case db.IsUnavailable(err) || ctx.Err() != nil:
		return a.transient(ctx, *c, err)
	default:
		// A race with a concurrent writer on the chosen node: the next
		// attempt picks again.
		log.Warn("reservation attempt failed; retrying", zap.Error(err))
		return a.wait(ctx, me, c, now, c.Wait.fit, a.LockedBackoff)
	}
}

// wait makes c wait (Waiting) for retry, fit nodes fitting it; once it has
// waited LockedWait it fails c instead.
func (a *Database) wait(ctx context.Context, me int64, c *Claimed, now time.Time, fit int64, retry time.Duration) (Outcome, error) {
	if fit > 0 {
		c.Wait.fit = fit
	}
	if waitFor(c, now, retry, a.LockedWait) {
		return Waiting, nil
	}
	return a.fail(ctx, me, *c, fmt.Sprintf(
		"could not reserve any of %d suitable nodes: they stayed locked by concurrent reservations or updates", c.Wait.fit))
}

var (
	errNoNode = errors.New("no unlocked node fits")
	errLost   = errors.New("allocation no longer owned")
)

// reserveOnce is one reservation statement (Reserve). It returns the reserved
// node's uuid, errNoNode when no unlocked node fits, errLost when the
// allocation is no longer this conductor's. The name-first rule applies to
// the first attempt only.
func (a *Database) reserveOnce(ctx context.Context, me int64, c Claimed, tryName bool) (uuid.UUID, error) {
	p := ReserveParams{Candidates: c.CandidateNodes, ResourceClass: c.ResourceClass, Owner: c.Owner,
		Traits: c.Traits, AllocationID: c.ID, Me: me}
	if tryName {
		p.Name = c.Name
	}
	r, err := a.q.Reserve(ctx, p)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return uuid.Nil, errNoNode
	case err != nil:
		return uuid.Nil, err
	case !r.Reserved:
		return uuid.Nil, errLost
	}
	return r.NodeUuid, nil
}

func (a *Database) transient(_ context.Context, c Claimed, err error) (Outcome, error) {
	return Lost, fmt.Errorf("processing allocation %s: %w", c.UUID, err)
}

// fail moves c to error, guarded by conductor_affinity = me.
func (a *Database) fail(ctx context.Context, me int64, c Claimed, reason string) (Outcome, error) {
	return markFailed(ctx, a.q, a.log, me, c, reason, "")
}

// failNoFit moves c to error when no node passes the filters (stats
// Fitting is 0), with Ironic's sentence for the filter that left nothing
// followed by the counts (noFit).
func (a *Database) failNoFit(ctx context.Context, me int64, c Claimed, stats FitStatsRow) (Outcome, error) {
	reason, detail := noFit(c, stats)
	return markFailed(ctx, a.q, a.log, me, c, reason, detail)
}

// markFailed moves c to error with last_error "Failed to process
// allocation <uuid>: <reason>." (Ironic's AllocationFailed text), followed
// by " (<detail>)" when detail is not empty, guarded by conductor_affinity =
// me (both backends): Failed, Lost when c is no longer me's (nothing
// written), or an error (the database is unreachable; c stays allocating and
// owned).
func markFailed(ctx context.Context, q *Queries, log *zap.Logger, me int64, c Claimed, reason, detail string) (Outcome, error) {
	msg := fmt.Sprintf("Failed to process allocation %s: %s.", c.UUID, reason)
	if detail != "" {
		msg += " (" + detail + ")"
	}
	n, err := q.FailAllocation(ctx, FailAllocationParams{LastError: &msg, ID: c.ID, Me: me})
	if err != nil {
		return Lost, fmt.Errorf("processing allocation %s: %w", c.UUID, err)
	}
	if n == 0 {
		return Lost, nil
	}
	log.Info("allocation failed", zap.Stringer("allocation", c.UUID), zap.String("last_error", msg))
	return Failed, nil
}

// noFit is the last_error reason and detail for an allocation no node fits
// (stats.Fitting is 0). The reason is Ironic's own sentence for the filter
// that left nothing, as Ironic's conductor words it (_candidate_nodes),
// because tools match on it:
//   - "none of the requested nodes are available and match the resource
//     class <rc>" when candidate_nodes is set and no node passes the class,
//     availability, candidate and owner filters;
//   - "no available nodes match the resource class <rc>" for the same
//     without candidate_nodes;
//   - "no suitable nodes have the requested traits <t1>, <t2>" when nodes
//     pass those filters but none has every requested trait.
//
// The detail is "no node fits: " and the count each filter left (describe).
func noFit(c Claimed, s FitStatsRow) (reason, detail string) {
	switch {
	case s.Candidates == 0 && len(c.CandidateNodes) > 0:
		reason = "none of the requested nodes are available and match the resource class " + c.ResourceClass
	case s.Candidates == 0:
		reason = "no available nodes match the resource class " + c.ResourceClass
	default:
		reason = "no suitable nodes have the requested traits " + strings.Join(c.Traits, ", ")
	}
	return reason, "no node fits: " + describe(c, s)
}

// describe says how many nodes each filter left, in order, and, when no
// node of the class is available, why (unavailable): "0 available" alone
// does not tell maintenance from nodes taken or never powered. With an
// owner only its nodes (owned by or leased to it) are counted, from the
// first count on: the owner's members read last_error, and other
// projects' nodes are none of their business.
func describe(c Claimed, s FitStatsRow) string {
	class := fmt.Sprintf("%d of resource class %s", s.WithClass, c.ResourceClass)
	if c.Owner != nil {
		class += " owned by or leased to " + *c.Owner
	}
	parts := []string{class, fmt.Sprintf("%d available", s.Available)}
	if s.Reservable > 0 {
		// Kept for leases (docs/leases.md): say so, or "4 available" and
		// no node taken reads as a bug.
		parts[1] += fmt.Sprintf(" (%d of them reservable, for leases only)", s.Reservable)
	}
	if len(c.CandidateNodes) > 0 {
		parts = append(parts, fmt.Sprintf("%d among the %d candidate_nodes", s.Candidates, len(c.CandidateNodes)))
	}
	if len(c.Traits) > 0 {
		parts = append(parts, fmt.Sprintf("%d with traits %s", s.Fitting, strings.Join(c.Traits, ", ")))
	}
	out := strings.Join(parts, ", ")
	if s.Available == 0 && s.WithClass > 0 {
		out += "; not available: " + whyUnavailable(s)
	}
	return out
}

// whyUnavailable counts why the nodes of the class are not available, each
// node once, for the first reason that applies (FitStats): "25 in
// maintenance, 10 hold an allocation or instance, 3 not in provision state
// available, 2 have no power state (...)". Ironic never allocates a node
// whose power state is null (its allocation filter with_power_state),
// and fake-hardware nodes have none until a power action or the power
// sync: the hint says how to give them one.
func whyUnavailable(s FitStatsRow) string {
	plural := func(n int64, one, many string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	var parts []string
	if s.InMaintenance > 0 {
		parts = append(parts, fmt.Sprintf("%d in maintenance", s.InMaintenance))
	}
	if s.Held > 0 {
		parts = append(parts, plural(s.Held, "holds an allocation or instance", "hold an allocation or instance"))
	}
	if s.OtherState > 0 {
		parts = append(parts, fmt.Sprintf("%d not in provision state available", s.OtherState))
	}
	if s.NoPower > 0 {
		parts = append(parts, plural(s.NoPower, "has no power state", "have no power state")+
			" (Ironic allocates only nodes with a power state: power them off first)")
	}
	return strings.Join(parts, ", ")
}
