package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/scheduler"
)

// PlacementUserID is the user_id of every Placement consumer the conductor
// writes; the project_id is the allocation's owner, or PlacementUserID when
// it has none.
const PlacementUserID = "metalloc"

// PlacementConfig tunes a Placement. Zero values take the defaults
// noted.
type PlacementConfig struct {
	// Hostname is the conductor's hostname, recorded in each Selection.
	Hostname string
	// MaxAlternates is how many alternates each selection carries besides
	// the chosen node (default 2; negative: none).
	MaxAlternates int
	// MaxAttempts is how many times one allocation asks Placement for
	// candidates, each time trying the chosen node and its alternates,
	// before it goes to error (default 3).
	MaxAttempts int
	// LockedWait bounds how long a row waits (Process returning Waiting)
	// in mode local while every selection is a node concurrent claims hold
	// or just took (default 2s; conductor.locked_node_wait), as the
	// database backend.
	LockedWait time.Duration
	// Mode is PlacementModeAuto (the default), PlacementModeLocal or
	// PlacementModeHTTP: whether claims run in-process, in the node
	// reservation's transaction, or through the Placement API.
	Mode string
}

// Placement processes claimed allocations with the Placement
// backend: it selects destinations through Placement (scheduler), claims the
// chosen node with PUT /allocations/{allocation uuid}, falls back to the
// alternates on a conflict, and records the reservation in the database as
// the database backend does. Every claim is logged in placement_claims
// before it is written, so that the resource tracker can remove what a dead
// conductor or an unreachable Placement left behind.
type Placement struct {
	pool  *pgxpool.Pool
	q     *Queries
	pc    *client.Client
	sched *scheduler.Scheduler
	// localSched selects through placement.Local (mode local), with
	// localCands caching its answers.
	localSched *scheduler.Scheduler
	localCands *cachedCandidates
	// localBatchSched is localSched without the database filter (the
	// batch transaction checks the nodes under lock).
	localBatchSched *scheduler.Scheduler
	log             *zap.Logger
	// maxAttempts is PlacementConfig.MaxAttempts.
	maxAttempts int
	// mode is PlacementConfig.Mode, resolved (Local).
	mode modeState
	// lockedWait is PlacementConfig.LockedWait.
	lockedWait time.Duration
	// locked is the kinds of request whose every selection was locked at
	// their last attempt in mode local, or whose fitting nodes Placement
	// did not offer yet (unmirrored, either mode).
	locked *lockedKinds
}

// NewPlacement returns a Placement on pool and the
// Placement service pc.
func NewPlacement(pool *pgxpool.Pool, pc *client.Client, cfg PlacementConfig, log *zap.Logger) *Placement {
	if cfg.MaxAlternates == 0 {
		cfg.MaxAlternates = 2
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.LockedWait <= 0 {
		cfg.LockedWait = 2 * time.Second
	}
	q := New(pool)
	cands := &cachedCandidates{inner: placement.NewLocal(pool), byKey: map[string]*candidateEntry{}}
	p := &Placement{
		pool: pool, q: q, pc: pc, log: log, maxAttempts: cfg.MaxAttempts, lockedWait: cfg.LockedWait,
		locked: newLockedKinds(5*time.Millisecond, 80*time.Millisecond),
		sched: &scheduler.Scheduler{Client: pc, Hostname: cfg.Hostname, MaxAlternates: max(cfg.MaxAlternates, 0),
			Filter: fitFilter{q}},
		localSched: &scheduler.Scheduler{Client: cands, Hostname: cfg.Hostname,
			MaxAlternates: max(cfg.MaxAlternates, 0), Filter: fitFilter{q}},
		localCands: cands,
		localBatchSched: &scheduler.Scheduler{Client: cands, Hostname: cfg.Hostname,
			MaxAlternates: max(cfg.MaxAlternates, 0)},
	}
	switch cfg.Mode {
	case PlacementModeLocal:
		p.mode.local.Store(1)
	case PlacementModeHTTP:
		p.mode.local.Store(2)
	}
	return p
}

// Scheduler is the scheduler the allocator selects destinations with over
// HTTP.
func (p *Placement) Scheduler() *scheduler.Scheduler { return p.sched }

// fitFilter is the scheduler's database filter (FitNodes).
type fitFilter struct{ q *Queries }

func (f fitFilter) FitNodes(ctx context.Context, spec scheduler.RequestSpec, nodes []uuid.UUID) ([]uuid.UUID, error) {
	traits := spec.Traits
	if traits == nil {
		traits = []string{}
	}
	return f.q.FitNodes(ctx, FitNodesParams{Uuids: nodes, ResourceClass: spec.ResourceClass, Owner: spec.Owner, Traits: traits})
}

// step is how claiming one Selection ended.
type step int

const (
	// stepReserved: claimed in Placement and reserved in the database.
	stepReserved step = iota
	// stepTaken: Placement refused the claim (409: the node's capacity is
	// used by a concurrent claim); nothing was written.
	stepTaken
	// stepChanged: claimed in Placement, but the node no longer fits in the
	// database (reserved, locked or changed meanwhile); the Placement
	// allocation was removed again.
	stepChanged
	// stepLost: the allocation is no longer this conductor's.
	stepLost
	// stepInstanceTaken: another node already has the allocation's uuid as
	// its instance_uuid.
	stepInstanceTaken
)

// placementRefused wraps a Placement answer that is neither a conflict nor
// an outage (a 4xx): retrying does not help, the allocation fails with it.
type placementRefused struct{ err error }

func (e *placementRefused) Error() string { return e.err.Error() }
func (e *placementRefused) Unwrap() error { return e.err }

// Process claims a node for c on behalf of conductor me, or moves c to
// error with a last_error a person can act on, with the contract of
// Database.Process: Reserved, Failed, or Lost (the allocation is no longer
// me's; its Placement allocation is removed unless a new owner holds it).
// It returns an error only when the database or Placement is unreachable or
// ctx ends: the row then stays allocating and owned, to be resumed, and
// whatever it wrote to Placement stays logged in placement_claims (the
// resumed run replaces it; the tracker removes it if the row ends
// otherwise).
//
// For each of up to MaxAttempts rounds it asks the scheduler for the chosen
// node and its alternates and tries them in order: log the claim, PUT
// /allocations/{c.UUID} with the selection's allocation request (replacing
// the consumer's allocations if a previous run left some), then reserve that
// node in one database transaction guarded by conductor_affinity = me. A 409
// from Placement or a node that changed in the database moves on to the next
// selection. In mode local (see Local) the candidates come from
// metalloc-placement's search in-process and each selection is claimed by
// claimLocal: the claim log, the reservation and the Placement write in one
// transaction, rolled back whole on a refusal; while every selection is a
// node concurrent claims hold, it returns Waiting, as the database backend
// does, until the row has waited LockedWait (the rows of one kind of
// request waiting for one attempt at a time: lockedKinds). In either mode,
// a row for which Placement offers nothing while the database has nodes
// that fit it (not mirrored yet) waits the same way (unmirrored).
func (p *Placement) Process(ctx context.Context, me int64, cp *Claimed) (Outcome, error) {
	log := p.log.With(zap.Stringer("allocation", cp.UUID))
	cp.normalize()
	c := *cp
	spec := scheduler.RequestSpec{InstanceUUID: c.UUID, ResourceClass: c.ResourceClass, Traits: c.Traits,
		CandidateNodes: c.CandidateNodes, Owner: c.Owner}
	local := p.Local(ctx)
	kind, now := kindOf(cp), time.Now()
	if cp.Wait.Waiting() && !cp.Wait.expired(now, p.lockedWait) {
		if left, _, ok := p.locked.wait(kind, now); ok && waitFor(cp, now, left, p.lockedWait) {
			return Waiting, nil
		}
	}
	var tried, taken, changed int
	for attempt := 1; attempt <= p.maxAttempts; attempt++ {
		if local && attempt > 1 {
			// Every selection of the cached answer failed: ask afresh.
			p.localCands.forget()
		}
		sels, err := p.selectDestinations(ctx, local, spec, 1)
		switch {
		case err == nil:
		case errors.Is(err, scheduler.ErrNoValidHost) && attempt > 1:
			return p.fail(ctx, me, c, fmt.Sprintf(
				"no node could be claimed in %s: alternates consumed by concurrent claims, and Placement "+
					"has no candidates left (%d selections tried: %d taken in Placement, %d changed in the database)",
				attempts(attempt-1), tried, taken, changed))
		case errors.Is(err, scheduler.ErrNoValidHost), errors.Is(err, scheduler.ErrInvalidRequest):
			// Placement offers no node, or does not know the class or a
			// trait (400). When the database has fitting nodes Placement
			// does not offer yet (made available a moment ago, before the
			// tracker mirrored them, and their class and traits with the
			// first of them), the row waits for them (Waiting), as for
			// locked nodes, up to LockedWait; otherwise it fails saying
			// what the database knows.
			wait, werr := p.unmirrored(ctx, cp, now)
			if werr != nil {
				return p.trouble(ctx, me, c, werr)
			}
			if wait {
				if local {
					p.localCands.forget()
				}
				return Waiting, nil
			}
			return p.failNoFit(ctx, me, c, err)
		default:
			return p.trouble(ctx, me, c, p.placementErr(err))
		}
		for _, sel := range sels[0] {
			tried++
			claim := p.claimOne
			if local {
				claim = p.claimLocal
			}
			st, err := claim(ctx, me, c, sel)
			if err != nil {
				return p.trouble(ctx, me, c, err)
			}
			switch st {
			case stepReserved:
				p.locked.free(kind)
				log.Debug("reserved node through Placement", zap.Stringer("node", sel.ComputeNodeUUID),
					zap.Int("attempt", attempt), zap.Int("tried", tried))
				return Reserved, nil
			case stepLost:
				log.Info("allocation no longer owned by this conductor; dropping it")
				return Lost, nil
			case stepInstanceTaken:
				return p.fail(ctx, me, c, fmt.Sprintf(
					"instance %s is already associated with another node (its uuid is some node's instance_uuid)", c.UUID))
			case stepTaken:
				taken++
			case stepChanged:
				changed++
			}
			log.Debug("selection not claimed; trying the next one", zap.Stringer("node", sel.ComputeNodeUUID),
				zap.Bool("taken_in_placement", st == stepTaken))
		}
		if local && attempt == p.maxAttempts && taken == 0 &&
			waitFor(cp, now, p.locked.locked(kind, 0, now), p.lockedWait) {
			// In-process, every selection was a node locked or reserved
			// by a concurrent claim a moment ago (nothing taken in
			// Placement): as the database backend, wait (Waiting) up to
			// lockedWait and try again with fresh candidates.
			return Waiting, nil
		}
	}
	return p.fail(ctx, me, c, fmt.Sprintf(
		"no node could be claimed in %s: alternates consumed by concurrent claims "+
			"(%d selections tried: %d taken in Placement, %d changed in the database)",
		attempts(p.maxAttempts), tried, taken, changed))
}

// attempts is "1 attempt", "3 attempts".
func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// claimOne claims sel for c: log the claim, write it to Placement, reserve
// the node in the database. Its error is an outage (database or Placement
// unreachable, ctx ended) or a *placementRefused.
func (p *Placement) claimOne(ctx context.Context, me int64, c Claimed, sel scheduler.Selection) (step, error) {
	node := sel.ComputeNodeUUID
	req, err := sel.Request()
	if err != nil {
		return 0, &placementRefused{err}
	}
	if c.CandidateNodes != nil && !slices.Contains(c.CandidateNodes, node) {
		return stepChanged, nil // not ours to take; the scheduler filters these
	}
	if err := p.q.RecordPlacementClaim(ctx, RecordPlacementClaimParams{ConsumerUuid: c.UUID, ProviderUuid: node}); err != nil {
		return 0, fmt.Errorf("logging the Placement claim: %w", err)
	}
	claim := client.Claim{Request: req, ProjectID: projectOf(c), UserID: PlacementUserID}
	err = p.pc.PutAllocations(ctx, c.UUID, claim)
	if client.IsConcurrentUpdate(err) {
		// The consumer may exist already: a run of this allocation that a
		// restart or a takeover interrupted. Replace its allocations. (A
		// conflict on capacity, another claim's win, needs no re-read.)
		cur, gerr := p.pc.GetAllocations(ctx, c.UUID)
		if gerr != nil {
			return 0, p.placementErr(gerr)
		}
		if cur.ConsumerGeneration != nil {
			claim.ConsumerGeneration = cur.ConsumerGeneration
			err = p.pc.PutAllocations(ctx, c.UUID, claim)
		}
	}
	switch {
	case err == nil:
	case client.IsConflict(err):
		return stepTaken, nil
	default:
		return 0, p.placementErr(err)
	}

	r, err := p.q.Reserve(ctx, ReserveParams{Candidates: []uuid.UUID{node}, ResourceClass: c.ResourceClass,
		Owner: c.Owner, Traits: c.Traits, AllocationID: c.ID, Me: me})
	switch {
	case err == nil && r.Reserved:
		return stepReserved, nil
	case err == nil:
		p.releaseLost(ctx, me, c, &node)
		return stepLost, nil
	case errors.Is(err, pgx.ErrNoRows):
		// Placement did not know yet (or the node is locked by an API
		// update right now): give the node back and go on.
	case db.IsUniqueViolation(err, "nodes_instance_uuid_key"):
		if derr := p.unclaim(ctx, c); derr != nil {
			return 0, derr
		}
		return stepInstanceTaken, nil
	case db.IsUnavailable(err) || ctx.Err() != nil:
		// Resumed later; the resumed run replaces the Placement allocation.
		return 0, err
	default:
		p.log.Warn("reserving the claimed node failed; trying the next one", zap.Stringer("allocation", c.UUID),
			zap.Stringer("node", node), zap.Error(err))
	}
	if err := p.unclaim(ctx, c); err != nil {
		return 0, err
	}
	return stepChanged, nil
}

// placementErr classifies an error: a Placement answer that is not an
// outage becomes *placementRefused; outages and other errors (the
// database's) stay as they are.
func (p *Placement) placementErr(err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) || client.IsUnreachable(err) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &placementRefused{err}
}

// unclaim removes c's allocations from Placement (a 404 is fine: there were
// none). Its error is an outage or *placementRefused.
func (p *Placement) unclaim(ctx context.Context, c Claimed) error {
	if err := p.pc.DeleteAllocations(ctx, c.UUID); err != nil && !client.IsNotFound(err) {
		return p.placementErr(err)
	}
	return nil
}

// forget removes c's entry from the claim log once Placement holds nothing
// for it (only the entry naming node, when node is set).
func (p *Placement) forget(ctx context.Context, c Claimed, node *uuid.UUID) {
	if _, err := p.q.ForgetPlacementClaim(ctx, ForgetPlacementClaimParams{ConsumerUuid: c.UUID, ProviderUuid: node}); err != nil {
		// The tracker removes the entry later.
		p.log.Warn("could not clear the Placement claim log entry", zap.Stringer("allocation", c.UUID), zap.Error(err))
	}
}

// releaseLost removes what this conductor wrote to Placement for c after it
// found c is no longer its own, without touching a new owner's claim: it
// leaves c alone when another conductor owns it (allocating) or it is
// active, and otherwise removes c's allocations only if they are still the
// ones on node (when given) at the generation just read (PUT with empty
// allocations and that consumer_generation: a compare-and-set delete).
// Failures are logged: the claim log entry stays for the tracker.
func (p *Placement) releaseLost(ctx context.Context, me int64, c Claimed, node *uuid.UUID) {
	log := p.log.With(zap.Stringer("allocation", c.UUID))
	own, err := p.q.AllocationOwnership(ctx, c.ID)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // deleted: release
	case err != nil:
		log.Warn("could not check who owns the allocation; leaving its Placement allocation to the tracker", zap.Error(err))
		return
	case own.State == allocation.StateActive,
		own.State == allocation.StateAllocating && own.ConductorAffinity != nil && *own.ConductorAffinity != me:
		return // the new owner holds the consumer
	}
	cur, err := p.pc.GetAllocations(ctx, c.UUID)
	if err != nil {
		log.Warn("could not read the Placement allocation to release; leaving it to the tracker", zap.Error(err))
		return
	}
	if cur.ConsumerGeneration == nil || len(cur.Allocations) == 0 {
		p.forget(ctx, c, node)
		return
	}
	if node != nil {
		if _, ok := cur.Allocations[*node]; !ok || len(cur.Allocations) != 1 {
			return // someone else's claim now
		}
	}
	err = p.pc.PutAllocations(ctx, c.UUID, client.Claim{
		Request:   client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{}},
		ProjectID: projectOf(c), UserID: PlacementUserID, ConsumerGeneration: cur.ConsumerGeneration,
	})
	if err != nil {
		if !client.IsConflict(err) {
			log.Warn("could not release the Placement allocation; leaving it to the tracker", zap.Error(err))
		}
		return
	}
	p.forget(ctx, c, node)
}

// trouble handles an error that stopped processing: an outage leaves the
// row allocating and owned (an error return, resumed later), anything else
// fails the allocation with it.
func (p *Placement) trouble(ctx context.Context, me int64, c Claimed, err error) (Outcome, error) {
	var refused *placementRefused
	if errors.As(err, &refused) {
		return p.fail(ctx, me, c, "Placement refused the claim: "+refused.Error())
	}
	return Lost, fmt.Errorf("processing allocation %s: %w", c.UUID, err)
}

// unmirrored reports whether c should wait (Waiting, c.Wait saying when
// to try again) for Placement to offer a node: the database has nodes that
// fit c, which Placement does not offer (the resource tracker mirrors a
// node a moment after it changes), and c has waited less than LockedWait
// since its first wait. The rows of c's kind then wait for one probe at a
// time (lockedKinds), as rows waiting for locked nodes do.
func (p *Placement) unmirrored(ctx context.Context, c *Claimed, now time.Time) (bool, error) {
	if c.Wait.expired(now, p.lockedWait) {
		return false, nil
	}
	stats, err := p.q.FitStats(ctx, FitStatsParams{
		ResourceClass: c.ResourceClass, Candidates: c.CandidateNodes, Owner: c.Owner, Traits: c.Traits,
	})
	if err != nil || stats.Fitting == 0 {
		return false, err
	}
	return waitFor(c, now, p.locked.locked(kindOf(c), stats.Fitting, now), p.lockedWait), nil
}

// failNoFit fails c when Placement offered no node on the first attempt or
// refused the request (an unknown trait or class). When the database has no
// fitting node either, last_error is Ironic's sentence for the filter that
// left nothing with the counts after it (noFit), as the database backend
// writes it. When the database has fitting nodes, it is Ironic's sentence
// for candidates that all dropped out during reservation, saying that
// Placement does not offer them.
func (p *Placement) failNoFit(ctx context.Context, me int64, c Claimed, nvh error) (Outcome, error) {
	stats, err := p.q.FitStats(ctx, FitStatsParams{
		ResourceClass: c.ResourceClass, Candidates: c.CandidateNodes, Owner: c.Owner, Traits: c.Traits,
	})
	if err != nil {
		return p.trouble(ctx, me, c, err)
	}
	if stats.Fitting == 0 {
		reason, detail := noFit(c, stats)
		return p.failDetail(ctx, me, c, reason, detail)
	}
	return p.failDetail(ctx, me, c, "all nodes were filtered out during reservation", fmt.Sprintf(
		"no node fits in Placement: %v; the database has %d fitting node(s) that Placement does not offer "+
			"(claimed there by concurrent allocations, or not mirrored by the resource tracker yet)",
		nvh, stats.Fitting))
}

// fail moves c to error (guarded by conductor_affinity = me), then removes
// its allocations from Placement and its claim log entry. If Placement
// cannot be reached, the entry stays and the tracker removes the
// allocation: c is in error now.
func (p *Placement) fail(ctx context.Context, me int64, c Claimed, reason string) (Outcome, error) {
	return p.failDetail(ctx, me, c, reason, "")
}

// failDetail is fail with a detail after the reason (markFailed).
func (p *Placement) failDetail(ctx context.Context, me int64, c Claimed, reason, detail string) (Outcome, error) {
	out, err := markFailed(ctx, p.q, p.log, me, c, reason, detail)
	if err != nil {
		return out, err
	}
	if out == Lost {
		if !p.Local(ctx) {
			// (A local claim never outlives its transaction; what an
			// earlier HTTP run left is the tracker's.)
			p.releaseLost(ctx, me, c, nil)
		}
		return Lost, nil
	}
	if p.Local(ctx) {
		if err := p.unclaimLocal(ctx, c); err != nil {
			p.log.Warn("could not remove the failed allocation's Placement allocation; the resource tracker will",
				zap.Stringer("allocation", c.UUID), zap.Error(err))
		}
		return Failed, nil
	}
	if err := p.unclaim(ctx, c); err != nil {
		p.log.Warn("could not remove the failed allocation's Placement allocation; the resource tracker will",
			zap.Stringer("allocation", c.UUID), zap.Error(err))
		return Failed, nil
	}
	p.forget(ctx, c, nil)
	return Failed, nil
}

// projectOf is the Placement project_id of c's consumer.
func projectOf(c Claimed) string {
	if c.Owner != nil && *c.Owner != "" {
		return *c.Owner
	}
	return PlacementUserID
}
