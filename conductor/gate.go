package conductor

import "sync/atomic"

// claimGate lets at most max of a conductor's workers run a claim statement
// at the same time, and makes sure a claim that was wanted meanwhile is not
// lost. One claimer per conductor serializes the claims behind one
// transaction and puts its latency on every row; one per worker lets every
// notification of a burst run its own claim, most of which find the rows
// taken already (see maxClaimers).
//
// A worker calls enter before claiming. true: it claims, and calls leave
// when its statement has returned. false: max workers are claiming; the
// gate records that a claim was wanted (pending), and one of them, on
// leave, is told to claim again at once (leave returns true), taking in
// one batch everything that arrived meanwhile.
//
// No lost claim: a worker refused by enter has set pending while at least
// one claimer was inside; every claimer clears pending only on leave, after
// it has let go of its slot, so the last claimer to leave sees it. A
// refused worker that finds no claimer left (the last one left between its
// two reads) takes a slot itself.
type claimGate struct {
	max      int32
	claiming atomic.Int32
	pending  atomic.Bool
}

// newClaimGate returns a gate for at most n claimers (at least one).
func newClaimGate(n int) *claimGate { return &claimGate{max: int32(max(n, 1))} }

// enter reports whether the caller may claim now; false leaves the claim to
// the workers claiming (one of them claims again).
func (g *claimGate) enter() bool {
	for {
		k := g.claiming.Load()
		if k < g.max {
			if g.claiming.CompareAndSwap(k, k+1) {
				// Rows notified before this point are visible to the
				// claim statement about to run.
				g.pending.Store(false)
				return true
			}
			continue
		}
		g.pending.Store(true)
		if g.claiming.Load() > 0 {
			// A holder reads pending after it lets go of its slot, so
			// it sees ours and claims again.
			return false
		}
	}
}

// leave ends a claim that enter let in. It returns whether a claim was
// wanted while this one ran: the caller then claims again at once.
func (g *claimGate) leave() (again bool) {
	g.claiming.Add(-1)
	return g.pending.Swap(false)
}
