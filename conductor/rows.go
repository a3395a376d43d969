package conductor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/metalloc/metalloc/conductor/backend"
)

// Rows owns the life cycle of allocation rows as conductors see them: who
// owns a row (conductor_affinity) and when that changes. Owned lists a conductor's unfinished ones, DeadOwners and
// TakeOver move rows of dead conductors, Release hands rows back on a clean
// stop. Its SQL is conductor/query.sql, where "alive" is the one function
// metalloc_conductor_alive. The outcome writes of a row (reserve, fail) are
// the reservation backends' (Backend), each a compare-and-set on
// conductor_affinity = me AND state = 'allocating'. See doc.go for the
// protocol.
type Rows struct {
	q *Queries
	// timeout is the heartbeat age after which a conductor is dead.
	timeout time.Duration
}

// NewRows returns the row life cycle on q, with conductors whose heartbeat
// is older than timeout counting as dead.
func NewRows(q *Queries, timeout time.Duration) *Rows { return &Rows{q: q, timeout: timeout} }

// claimed builds an backend.Claimed from the columns every row query
// returns.
func claimed(id int64, u uuid.UUID, name *string, rc string, cands []uuid.UUID, owner *string,
	traits []string, created time.Time) backend.Claimed {
	return backend.Claimed{ID: id, UUID: u, Name: name, ResourceClass: rc, CandidateNodes: cands,
		Owner: owner, Traits: traits, CreatedAt: created}
}

// Owned returns conductor me's unfinished allocations, oldest first (resumed
// at start-up, after an outage, and when the work queue overflowed).
func (r *Rows) Owned(ctx context.Context, me int64) ([]backend.Claimed, error) {
	rows, err := r.q.OwnedAllocating(ctx, me)
	if err != nil {
		return nil, fmt.Errorf("listing owned allocations: %w", err)
	}
	out := make([]backend.Claimed, len(rows))
	for i, a := range rows {
		out[i] = claimed(a.ID, a.Uuid, a.Name, a.ResourceClass, a.CandidateNodes, a.Owner, a.Traits, a.CreatedAt)
	}
	return out, nil
}

// DeadOwner is a conductor that counts as dead (offline after a clean stop,
// or a heartbeat older than the timeout) and still owns allocating rows.
type DeadOwner struct {
	ID          int64
	Hostname    string
	Online      bool
	HeartbeatAt time.Time
}

// DeadOwners lists the dead conductors, other than me, that own allocating
// rows.
func (r *Rows) DeadOwners(ctx context.Context, me int64) ([]DeadOwner, error) {
	rows, err := r.q.DeadOwners(ctx, DeadOwnersParams{Me: me, AliveSeconds: r.timeout.Seconds()})
	if err != nil {
		return nil, fmt.Errorf("listing dead conductors: %w", err)
	}
	out := make([]DeadOwner, len(rows))
	for i, d := range rows {
		out[i] = DeadOwner{d.ID, d.Hostname, d.Online, d.HeartbeatAt}
	}
	return out, nil
}

// TakeOver moves up to max of dead's allocating rows to conductor me, one
// compare-and-set update per row (the spec's "UPDATE allocations SET
// conductor_affinity = me WHERE id = $id AND conductor_affinity = $dead"),
// in random order so that conductors taking over at the same moment spread
// the rows between them. The update also requires dead to be dead still, and
// skips a row locked at that moment. It returns the rows won (to be
// processed) and how many were lost to another conductor, to dead coming
// back, or to a lock.
func (r *Rows) TakeOver(ctx context.Context, me int64, dead DeadOwner, max int) (won []backend.Claimed, lost int, err error) {
	ids, err := r.q.AllocatingOf(ctx, AllocatingOfParams{Owner: dead.ID, MaxRows: int32(max)})
	if err != nil {
		return nil, 0, fmt.Errorf("listing allocations of conductor %s: %w", dead.Hostname, err)
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		rows, err := r.q.TakeOver(ctx, TakeOverParams{Me: me, ID: id, Dead: dead.ID, AliveSeconds: r.timeout.Seconds()})
		if err != nil {
			return won, lost, fmt.Errorf("taking over allocation %d from %s: %w", id, dead.Hostname, err)
		}
		if len(rows) == 0 {
			lost++
			continue
		}
		a := rows[0]
		won = append(won, claimed(a.ID, a.Uuid, a.Name, a.ResourceClass, a.CandidateNodes, a.Owner, a.Traits, a.CreatedAt))
	}
	return won, lost, nil
}

// Release hands conductor me's allocating rows and allocation groups back
// (unowned), for a clean stop: the release wakes the other conductors, who
// claim them at once. It returns how many rows and groups were released.
func (r *Rows) Release(ctx context.Context, me int64) (int64, error) {
	n, err := r.q.ReleaseOwned(ctx, me)
	if err != nil {
		return 0, fmt.Errorf("releasing owned allocations: %w", err)
	}
	m, err := r.q.ReleaseOwnedGroups(ctx, me)
	if err != nil {
		return n, fmt.Errorf("releasing owned allocation groups: %w", err)
	}
	return n + m, nil
}

// groupClaimed builds an backend.ClaimedGroup from a group row.
func groupClaimed(g AllocationGroup) backend.ClaimedGroup {
	return backend.ClaimedGroup{ID: g.ID, UUID: g.Uuid, Count: int(g.Count), ResourceClass: g.ResourceClass,
		Traits: g.Traits, CandidateNodes: g.CandidateNodes, Owner: g.Owner, Rule: g.Rule, RuleLevel: g.RuleLevel,
		Domain: g.Domain, CreatedAt: g.CreatedAt}
}

func groupsClaimed(gs []AllocationGroup) []backend.ClaimedGroup {
	out := make([]backend.ClaimedGroup, len(gs))
	for i, g := range gs {
		out[i] = groupClaimed(g)
	}
	return out
}

// ClaimGroups takes up to batch unowned allocating allocation groups for
// conductor me, oldest first, as Claim does for allocations (FOR UPDATE
// SKIP LOCKED). Both backends use it.
func (r *Rows) ClaimGroups(ctx context.Context, me int64, batch int) ([]backend.ClaimedGroup, error) {
	gs, err := r.q.ClaimGroups(ctx, ClaimGroupsParams{Me: me, Batch: int32(batch)})
	if err != nil {
		return nil, fmt.Errorf("claiming allocation groups: %w", err)
	}
	return groupsClaimed(gs), nil
}

// OwnedGroups returns conductor me's unfinished groups, oldest first.
func (r *Rows) OwnedGroups(ctx context.Context, me int64) ([]backend.ClaimedGroup, error) {
	gs, err := r.q.OwnedGroups(ctx, me)
	if err != nil {
		return nil, fmt.Errorf("listing owned allocation groups: %w", err)
	}
	return groupsClaimed(gs), nil
}

// TakeOverGroups is TakeOver for dead's allocating groups: one
// compare-and-set per group, in random order, skipping locked ones.
func (r *Rows) TakeOverGroups(ctx context.Context, me int64, dead DeadOwner, max int) (won []backend.ClaimedGroup, lost int, err error) {
	ids, err := r.q.GroupsAllocatingOf(ctx, GroupsAllocatingOfParams{Owner: dead.ID, MaxRows: int32(max)})
	if err != nil {
		return nil, 0, fmt.Errorf("listing allocation groups of conductor %s: %w", dead.Hostname, err)
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		gs, err := r.q.TakeOverGroup(ctx, TakeOverGroupParams{Me: me, ID: id, Dead: dead.ID, AliveSeconds: r.timeout.Seconds()})
		if err != nil {
			return won, lost, fmt.Errorf("taking over allocation group %d from %s: %w", id, dead.Hostname, err)
		}
		if len(gs) == 0 {
			lost++
			continue
		}
		won = append(won, groupClaimed(gs[0]))
	}
	return won, lost, nil
}
