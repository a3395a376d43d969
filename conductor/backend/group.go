package backend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/allocgroup"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/placement/client"
	"github.com/metalloc/metalloc/topology"
)

// Placement is how the placement backend claims a group's members in
// Placement (*Placement): which providers Placement
// offers (one GET /allocation_candidates), and all members claimed at once
// (in-process in the reservation's transaction, or one POST /allocations
// before it, undone when it does not commit).
type GroupPlacement interface {
	// GroupOffers is Placement.GroupOffers.
	GroupOffers(ctx context.Context, rc string, traits []string) (GroupOffer, error)
	// Local reports whether ClaimGroup writes in the reservation's
	// transaction (Placement.Local).
	Local(ctx context.Context) bool
	// ClaimGroup is Placement.ClaimGroup.
	ClaimGroup(ctx context.Context, tx pgx.Tx, owner *string, offer GroupOffer,
		members []GroupMember) error
	// UnclaimGroup is Placement.UnclaimGroup.
	UnclaimGroup(ctx context.Context, members []GroupMember)
}

// GroupReserver places claimed groups for a conductor: in the database alone
// (the database backend), or also in Placement when Placement is set (the
// placement backend).
type GroupReserver struct {
	pool *pgxpool.Pool
	q    *Queries
	// groups is the allocation_groups table's own statements (the member
	// count).
	groups *allocgroup.Queries
	log    *zap.Logger
	// Placement, when set, restricts the candidates to the nodes Placement
	// offers and claims every member there with the reservation (the
	// placement backend; see reserveOnce); nil: the database backend.
	Placement GroupPlacement
	// LockedWait bounds how long Process keeps trying while every fitting
	// plan has nodes locked by concurrent reservations or updates, before
	// the group goes to error (conductor.locked_node_wait, default 2 s).
	LockedWait time.Duration
	// LockedBackoff is the first wait between such rounds, doubled each
	// time up to 16x (default 5 ms).
	LockedBackoff time.Duration

	mu  sync.Mutex
	rng *rand.Rand

	cache candidateCache
}

// NewGroupReserver returns a GroupReserver on pool.
func NewGroupReserver(pool *pgxpool.Pool, log *zap.Logger) *GroupReserver {
	return &GroupReserver{pool: pool, q: New(pool), groups: allocgroup.New(pool), log: log, LockedWait: 2 * time.Second,
		LockedBackoff: 5 * time.Millisecond, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

var (
	errGroupLost = errors.New("group no longer owned")
	errShort     = errors.New("too few nodes of the plan could be locked")
	errChanged   = errors.New("the group changed meanwhile")
	// errTaken: Placement refused the claim of the plan's nodes (409:
	// capacity used by a concurrent claim); nothing was written.
	errTaken = errors.New("nodes of the plan were taken in Placement")
)

// groupNoFit is a permanent reason to fail the group.
type groupNoFit string

func (n groupNoFit) Error() string { return string(n) }

// Process reserves every missing member of g for conductor me, or moves g
// to error (a grow: back to active with its members) with a last_error a
// person can act on. Each round reads the free candidates and their
// topology paths (topology.FreeCandidates, no locks), asks topology.Choose
// for the fitting plans, best fit first, and tries them in order, each in
// one transaction (reserveOnce); when every plan had nodes locked by
// others (or, with Placement, taken there: a 409) it backs off and reads
// again, up to LockedWait. With Placement the candidates are those
// Placement offers, and a claim it refuses otherwise (a 4xx or 5xx) fails
// g with the answer. It returns an error only when the database or
// Placement is unreachable or ctx ends; g then stays allocating and owned,
// to be resumed.
func (r *GroupReserver) Process(ctx context.Context, me int64, g ClaimedGroup) (Outcome, error) {
	log := r.log.With(zap.Stringer("allocation_group", g.UUID))
	backoff := r.LockedBackoff
	began := time.Now()
	taken := 0 // plans whose claim Placement refused (409)
	for attempt := 0; ; attempt++ {
		plans, offer, need, err := r.plan(ctx, g)
		var nf groupNoFit
		switch {
		case errors.As(err, &nf):
			return r.Fail(ctx, me, g, string(nf))
		case err != nil:
			return Lost, fmt.Errorf("processing allocation group %s: %w", g.UUID, err)
		}
		for _, p := range plans {
			var took []int64
			took, err = r.reserveOnce(ctx, me, g, p, need, offer)
			switch {
			case err == nil:
				r.cache.taken(g, took)
				log.Debug("reserved allocation group", zap.Int("attempt", attempt), zap.Strings("domain", p.Domain))
				return Reserved, nil
			case errors.Is(err, errGroupLost):
				log.Info("allocation group no longer owned by this conductor; dropping it")
				return Lost, nil
			case errors.Is(err, errTaken):
				taken++
				continue
			case errors.Is(err, errShort):
				continue
			case errors.As(err, &nf):
				return r.Fail(ctx, me, g, string(nf))
			case errors.Is(err, errChanged):
			case db.IsUnavailable(err) || client.IsUnreachable(err) || ctx.Err() != nil:
				return Lost, fmt.Errorf("processing allocation group %s: %w", g.UUID, err)
			default:
				log.Warn("group reservation attempt failed; retrying", zap.Error(err))
			}
			break
		}
		r.cache.forget(g) // the next round reads afresh
		if time.Since(began) >= r.LockedWait {
			why := "their nodes stayed locked by concurrent reservations or updates"
			if taken > 0 {
				why += fmt.Sprintf(" or were taken in Placement (%d claims refused)", taken)
			}
			return r.Fail(ctx, me, g, fmt.Sprintf("could not reserve %d free nodes %s in any of %d fitting placements: %s",
				need, topology.Describe(g.ResourceClass, g.Traits), len(plans), why))
		}
		select {
		case <-ctx.Done():
			return Lost, fmt.Errorf("processing allocation group %s: %w", g.UUID, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, r.LockedBackoff*16)
	}
}

// plan reads the topology and the free candidates and returns the fitting
// plans for the need members g still lacks (best first); a groupNoFit error
// when none fits. need 0: one empty plan, only the activation is missing.
// With Placement, the candidates are only the nodes Placement offers too
// (offer, asked once per call).
func (r *GroupReserver) plan(ctx context.Context, g ClaimedGroup) (plans []topology.Plan, offer GroupOffer, need int, err error) {
	levels, err := topology.Load(ctx, r.pool)
	if err != nil {
		return nil, nil, 0, err
	}
	req := topology.Request{Rule: topology.Rule(g.Rule), Describe: topology.Describe(g.ResourceClass, g.Traits)}
	if req.Rule != topology.None {
		lvl := ""
		if g.RuleLevel != nil {
			lvl = *g.RuleLevel
		}
		if req.Level, err = topology.LevelIndex(levels, lvl); err != nil {
			return nil, nil, 0, groupNoFit(err.Error())
		}
	}
	cnt, err := r.groups.GroupMemberCount(ctx, g.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		return []topology.Plan{{}}, nil, 0, nil // deleted: reserveOnce finds it lost
	} else if err != nil {
		return nil, nil, 0, err
	}
	req.Count = int(cnt.Count - cnt.Members)
	if req.Count <= 0 {
		return []topology.Plan{{}}, nil, 0, nil // only the activation is missing
	}
	if cnt.Members > 0 && len(g.Domain) > 0 {
		if req.Rule == topology.Required {
			req.Within = g.Domain
		} else {
			req.Prefer = g.Domain
		}
	}
	if r.Placement != nil {
		offer, err = r.Placement.GroupOffers(ctx, g.ResourceClass, g.Traits)
		switch {
		case client.StatusOf(err) == http.StatusBadRequest:
			// A trait or class Placement does not know: it offers
			// nothing, and the no-fit message says what the database has.
			offer = GroupOffer{}
		case err != nil:
			return nil, nil, 0, placementTrouble(err)
		}
	}
	for fresh := false; ; fresh = true {
		cands, cached, err := r.cache.get(ctx, r.pool, g, fresh)
		if err != nil {
			return nil, nil, 0, err
		}
		free := len(cands)
		if offer != nil {
			cands = offered(cands, offer)
		}
		r.mu.Lock()
		plans, nf := topology.Choose(levels, cands, req, r.rng)
		r.mu.Unlock()
		switch {
		case nf == nil:
			return plans, offer, req.Count, nil
		case !cached && offer != nil && len(cands) < free:
			return nil, nil, 0, groupNoFit(fmt.Sprintf("%s; of the %d nodes free in the database, Placement offers %d", nf.Error(), free, len(cands)))
		case !cached:
			return nil, nil, 0, groupNoFit(nf.Error())
		}
		// Nodes may have been freed since the shared read: decide on a
		// fresh one.
	}
}

// offered is the candidates Placement offers (a new slice: cands may be
// the shared cache's).
func offered(cands []topology.Candidate, offer GroupOffer) []topology.Candidate {
	out := make([]topology.Candidate, 0, len(cands))
	for _, c := range cands {
		if _, ok := offer[c.UUID]; ok {
			out = append(out, c)
		}
	}
	return out
}

// placementTrouble classifies a Placement error: an outage stays an error
// (the group stays allocating and owned, resumed later); any other answer
// (a 4xx other than a claim's 409, a 5xx) fails the group with it, as a
// single allocation's "Placement refused the claim".
func placementTrouble(err error) error {
	var ce *client.Error
	if errors.As(err, &ce) && !client.IsUnreachable(err) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return groupNoFit("Placement refused the claim: " + err.Error())
	}
	return err
}

// reserveOnce tries plan p in one transaction: lock wanted (the missing
// count when planned) of its nodes that are still free (SKIP LOCKED, in
// plan order; fewer: errShort), then the group itself with the
// compare-and-set guard (not ours any more: errGroupLost), insert the members
// holding their nodes, and activate the group. It returns the nodes the
// members took.
//
// With Placement the members are claimed there too (Placement.ClaimGroup
// with offer; a 409: errTaken, nothing written). In mode local the claim
// is written in the same transaction, after the locks. Over HTTP it comes
// first, as a single allocation's: the members' nodes are the plan's first
// wanted ones, claimed (claim log, one POST /allocations) before the
// transaction locks exactly those; when the transaction does not commit,
// the claims are removed again (Placement.UnclaimGroup).
func (r *GroupReserver) reserveOnce(ctx context.Context, me int64, g ClaimedGroup, p topology.Plan, wanted int, offer GroupOffer) (took []int64, err error) {
	ids := make([]int64, len(p.Nodes))
	for i, n := range p.Nodes {
		ids[i] = n.ID
	}
	traits := g.Traits
	if traits == nil {
		traits = []string{}
	}
	cands := g.CandidateNodes
	if len(cands) == 0 {
		cands = nil
	}
	inTx := r.Placement != nil && r.Placement.Local(ctx)
	var members []GroupMember
	if r.Placement != nil && !inTx && wanted > 0 {
		if len(ids) < wanted {
			return nil, errShort
		}
		ids = ids[:wanted]
		members = newMembers(p.Nodes[:wanted])
		if err := r.claim(ctx, nil, g, offer, members); err != nil {
			return nil, err
		}
		defer func() {
			// Undo unless the database's answer was lost (unreachable,
			// ctx ended): the commit may have happened, so the claims
			// stay, logged; if it did not, the tracker removes them.
			if err != nil && !db.IsUnavailable(err) && ctx.Err() == nil {
				r.Placement.UnclaimGroup(ctx, members)
			}
		}()
	}
	err = db.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		q := New(tx)
		var locked []topology.Candidate
		took = nil
		if wanted > 0 {
			nodes, err := q.LockPlanNodes(ctx, LockPlanNodesParams{Nodes: ids, ResourceClass: g.ResourceClass,
				Candidates: cands, Owner: g.Owner, Traits: traits, Wanted: int32(wanted)})
			if err != nil {
				return err
			}
			if len(nodes) < wanted {
				return errShort
			}
			for _, n := range nodes {
				locked = append(locked, topology.Candidate{ID: n.ID, UUID: n.Uuid})
			}
		}
		row, err := q.LockOwnedGroup(ctx, LockOwnedGroupParams{ID: g.ID, Me: me})
		if errors.Is(err, pgx.ErrNoRows) {
			return errGroupLost
		} else if err != nil {
			return err
		}
		need := int(row.Count - row.Members)
		if need > len(locked) || (members != nil && need != len(members)) {
			return errChanged // grown meanwhile: plan again
		}
		if need == 0 {
			return q.ActivateGroup(ctx, ActivateGroupParams{ID: g.ID, First: row.Members == 0, Domain: p.Domain})
		}
		ms := members
		if inTx {
			ms = newMembers(locked[:need])
			if err := r.claim(ctx, tx, g, offer, ms); err != nil {
				return err
			}
		}
		var memberUUIDs []uuid.UUID
		for i, m := range ms {
			if m.Node != locked[i].UUID {
				return fmt.Errorf("member %d claimed node %s in Placement, locked %s", i, m.Node, locked[i].UUID)
			}
			memberUUIDs = append(memberUUIDs, m.Consumer)
		}
		nodeIDs := make([]int64, need)
		for i := range need {
			nodeIDs[i] = locked[i].ID
		}
		held, err := q.InsertMembers(ctx, InsertMembersParams{GroupID: g.ID, Me: me, NodeIds: nodeIDs,
			MemberUuids: memberUUIDs})
		if err != nil {
			return err
		}
		if int(held) != need {
			return fmt.Errorf("held %d nodes for %d members", held, need)
		}
		took = nodeIDs
		return q.ActivateGroup(ctx, ActivateGroupParams{ID: g.ID, First: row.Members == 0, Domain: p.Domain})
	})
	return took, err
}

// newMembers gives each node a member with a new uuid (its allocation and
// its Placement consumer).
func newMembers(nodes []topology.Candidate) []GroupMember {
	ms := make([]GroupMember, len(nodes))
	for i, n := range nodes {
		ms[i] = GroupMember{Consumer: uuid.New(), Node: n.UUID}
	}
	return ms
}

// claim claims members in Placement (in tx, or over HTTP when tx is nil):
// a 409 is errTaken, a refusal a groupNoFit, an outage as it is.
func (r *GroupReserver) claim(ctx context.Context, tx pgx.Tx, g ClaimedGroup, offer GroupOffer, members []GroupMember) error {
	err := r.Placement.ClaimGroup(ctx, tx, g.Owner, offer, members)
	if client.IsConflict(err) {
		return errTaken
	}
	if err != nil {
		return placementTrouble(err)
	}
	return nil
}

// Fail moves g to error with last_error "Failed to process allocation
// group <uuid>: <reason>." (a grow that failed: back to active with count =
// its members), guarded by conductor_affinity = me: Failed, Lost when g is
// no longer me's (nothing written), or an error (the database is
// unreachable; g stays allocating and owned).
func (r *GroupReserver) Fail(ctx context.Context, me int64, g ClaimedGroup, reason string) (Outcome, error) {
	msg := fmt.Sprintf("Failed to process allocation group %s: %s.", g.UUID, reason)
	n, err := r.q.FailGroup(ctx, FailGroupParams{LastError: &msg, ID: g.ID, Me: me})
	if err != nil {
		return Lost, fmt.Errorf("processing allocation group %s: %w", g.UUID, err)
	}
	if n == 0 {
		return Lost, nil
	}
	r.log.Info("allocation group failed", zap.Stringer("allocation_group", g.UUID), zap.String("last_error", msg))
	return Failed, nil
}
