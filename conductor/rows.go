package conductor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/conductor/backend"
)

// Rows owns the life cycle of allocation rows as conductors see them: who
// owns a row (conductor_affinity) and when that changes. Owned lists a
// conductor's unfinished ones, DeadOwners and TakeOver move rows of dead
// conductors, Release hands rows back on a clean stop; the same for
// allocation groups. Its SQL is conductor/query.sql, where "alive" is the
// one function metalloc_conductor_alive; its statements return ids, and
// the rows are read as the backends take them (backend.Read,
// backend.ReadGroups). The claims and the outcome writes of a row
// (reserve, fail) are the reservation backends' (package backend), each a
// compare-and-set on conductor_affinity = me AND state = 'allocating'. See
// doc.go for the protocol.
type Rows struct {
	pool *pgxpool.Pool
	q    *Queries
}

// NewRows returns the row life cycle on pool. Who is dead is read from the
// conductors' rows (metalloc_conductor_alive: the expiry each conductor
// writes), not judged with a timeout of the reader's.
func NewRows(pool *pgxpool.Pool) *Rows {
	return &Rows{pool: pool, q: New(pool)}
}

// Owned returns conductor me's unfinished allocations, oldest first (resumed
// at start-up, after an outage, and when the work queue overflowed).
func (r *Rows) Owned(ctx context.Context, me int64) ([]backend.Claimed, error) {
	ids, err := r.q.OwnedAllocating(ctx, me)
	if err == nil {
		var out []backend.Claimed
		if out, err = backend.Read(ctx, r.pool, me, ids); err == nil {
			return out, nil
		}
	}
	return nil, fmt.Errorf("listing owned allocations: %w", err)
}

// DeadOwner is a conductor that counts as dead (offline after a clean stop,
// or its expiry passed) and still owns allocating rows.
type DeadOwner struct {
	ID          int64
	Hostname    string
	Online      bool
	HeartbeatAt time.Time
}

// DeadOwners lists the dead conductors, other than me, that own allocating
// rows.
func (r *Rows) DeadOwners(ctx context.Context, me int64) ([]DeadOwner, error) {
	rows, err := r.q.DeadOwners(ctx, me)
	if err != nil {
		return nil, fmt.Errorf("listing dead conductors: %w", err)
	}
	out := make([]DeadOwner, len(rows))
	for i, d := range rows {
		out[i] = DeadOwner(d)
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
	wonIDs, lost, err := takeOverEach(ids, func(id int64) (int64, error) {
		return r.q.TakeOver(ctx, TakeOverParams{Me: me, ID: id, Dead: dead.ID})
	})
	if err != nil {
		err = fmt.Errorf("taking over allocations from %s: %w", dead.Hostname, err)
	}
	won, rerr := backend.Read(ctx, r.pool, me, wonIDs)
	if rerr != nil && err == nil {
		err = fmt.Errorf("reading allocations taken over from %s: %w", dead.Hostname, rerr)
	}
	return won, lost, err
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

// ClaimGroups takes up to batch unowned allocating allocation groups for
// conductor me, oldest first, as the backends' claims do for allocations
// (FOR UPDATE SKIP LOCKED). Both backends use it.
func (r *Rows) ClaimGroups(ctx context.Context, me int64, batch int) ([]backend.ClaimedGroup, error) {
	ids, err := r.q.ClaimGroups(ctx, ClaimGroupsParams{Me: me, Batch: int32(batch)})
	if err == nil {
		var gs []backend.ClaimedGroup
		if gs, err = backend.ReadGroups(ctx, r.pool, me, ids); err == nil {
			return gs, nil
		}
	}
	return nil, fmt.Errorf("claiming allocation groups: %w", err)
}

// OwnedGroups returns conductor me's unfinished groups, oldest first.
func (r *Rows) OwnedGroups(ctx context.Context, me int64) ([]backend.ClaimedGroup, error) {
	ids, err := r.q.OwnedGroups(ctx, me)
	if err == nil {
		var gs []backend.ClaimedGroup
		if gs, err = backend.ReadGroups(ctx, r.pool, me, ids); err == nil {
			return gs, nil
		}
	}
	return nil, fmt.Errorf("listing owned allocation groups: %w", err)
}

// TakeOverGroups is TakeOver for dead's allocating groups: one
// compare-and-set per group, in random order, skipping locked ones.
func (r *Rows) TakeOverGroups(ctx context.Context, me int64, dead DeadOwner, max int) (won []backend.ClaimedGroup, lost int, err error) {
	ids, err := r.q.GroupsAllocatingOf(ctx, GroupsAllocatingOfParams{Owner: dead.ID, MaxRows: int32(max)})
	if err != nil {
		return nil, 0, fmt.Errorf("listing allocation groups of conductor %s: %w", dead.Hostname, err)
	}
	wonIDs, lost, err := takeOverEach(ids, func(id int64) (int64, error) {
		return r.q.TakeOverGroup(ctx, TakeOverGroupParams{Me: me, ID: id, Dead: dead.ID})
	})
	if err != nil {
		err = fmt.Errorf("taking over allocation groups from %s: %w", dead.Hostname, err)
	}
	won, rerr := backend.ReadGroups(ctx, r.pool, me, wonIDs)
	if rerr != nil && err == nil {
		err = fmt.Errorf("reading allocation groups taken over from %s: %w", dead.Hostname, rerr)
	}
	return won, lost, err
}

// takeOverEach runs one compare-and-set takeover (cas: rows changed, 0 or 1)
// per id, in random order so that conductors taking over at the same
// moment spread the rows between them. It returns the ids won and how many
// were lost; on an error, those won so far.
func takeOverEach(ids []int64, cas func(id int64) (int64, error)) (won []int64, lost int, err error) {
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		n, err := cas(id)
		if err != nil {
			return won, lost, fmt.Errorf("row %d: %w", id, err)
		}
		if n == 0 {
			lost++
			continue
		}
		won = append(won, id)
	}
	return won, lost, nil
}
