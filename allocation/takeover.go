package allocation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// DeadOwner is a conductor that counts as dead (offline after a clean stop,
// or a heartbeat older than the timeout) and still owns allocating rows.
type DeadOwner struct {
	ID          int64
	Hostname    string
	Online      bool
	HeartbeatAt time.Time
}

// DeadOwners lists the dead conductors, other than me, that own allocating
// rows. A conductor is dead when it went offline or its heartbeat is older
// than timeout (ARCHITECTURE.md "High availability").
func (a *Allocator) DeadOwners(ctx context.Context, me int64, timeout time.Duration) ([]DeadOwner, error) {
	rows, err := a.q.DeadOwners(ctx, DeadOwnersParams{Me: me, AliveSeconds: timeout.Seconds()})
	if err != nil {
		return nil, fmt.Errorf("listing dead conductors: %w", err)
	}
	out := make([]DeadOwner, len(rows))
	for i, r := range rows {
		out[i] = DeadOwner{r.ID, r.Hostname, r.Online, r.HeartbeatAt}
	}
	return out, nil
}

// TakeOver moves up to max of dead's allocating rows to conductor me, one
// compare-and-set update per row (the spec's "UPDATE allocations SET
// conductor_affinity = me WHERE id = $id AND conductor_affinity = $dead"),
// in random order so that conductors taking over at the same moment spread
// the rows between them. The update also requires dead to be dead still, and
// skips a row locked at that moment. It returns the rows won (to be
// processed: see Process) and how many were lost to another conductor, to
// dead coming back, or to a lock.
func (a *Allocator) TakeOver(ctx context.Context, me int64, dead DeadOwner, timeout time.Duration, max int) (won []Claimed, lost int, err error) {
	ids, err := a.q.AllocatingOf(ctx, AllocatingOfParams{Owner: dead.ID, MaxRows: int32(max)})
	if err != nil {
		return nil, 0, fmt.Errorf("listing allocations of conductor %s: %w", dead.Hostname, err)
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		rows, err := a.q.TakeOver(ctx, TakeOverParams{Me: me, ID: id, Dead: dead.ID, AliveSeconds: timeout.Seconds()})
		if err != nil {
			return won, lost, fmt.Errorf("taking over allocation %d from %s: %w", id, dead.Hostname, err)
		}
		if len(rows) == 0 {
			lost++
			continue
		}
		r := rows[0]
		won = append(won, Claimed{r.ID, r.Uuid, r.Name, r.ResourceClass, r.CandidateNodes, r.Owner, r.Traits, r.CreatedAt})
	}
	return won, lost, nil
}

// ReleaseOwned hands conductor me's allocating rows back (unowned), for a
// clean stop: the release wakes the other conductors, who claim them at
// once. It returns how many rows were released.
func (a *Allocator) ReleaseOwned(ctx context.Context, me int64) (int64, error) {
	n, err := a.q.ReleaseOwned(ctx, me)
	if err != nil {
		return 0, fmt.Errorf("releasing owned allocations: %w", err)
	}
	return n, nil
}
