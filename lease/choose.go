package lease

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/metalloc/metalloc/topology"
)

// Rules of a reservation's topology (lease_reservations.rule), those of
// allocation groups.
const (
	RuleNone      = "none"
	RuleRequired  = "required"
	RulePreferred = "preferred"
)

// Reservation is what one reservation of a lease asks for: Count nodes of
// ResourceClass with every trait of Traits and none of Forbidden, under
// Rule at topology level Level (index LevelIndex in the topology; -1
// without one). Sources are the sources of the topology's levels down to
// Level (levelSources: what the reads compute the nodes' paths, and so
// their domains, from; none without a level; Store.Admit reads them from
// the topology when they are left out).
//
// Min, when between 1 and Count, makes Count a maximum: admission books
// Count nodes when they fit, else the most between Min and Count that do
// (Blazar's min and max of a physical:host reservation, package
// lease/blazar); under rule preferred Count stays exact. Such a Min is
// stored with Count as the reservation's range (min_count, max_count:
// what Blazar's API shows as min and max), beside the count booked. Nodes,
// when not nil, restricts the reservation to those node ids (what a
// filter on node properties matched, lease/blazar); an empty non-nil list
// matches none. It is not stored: the lease keeps the nodes it booked.
type Reservation struct {
	ResourceClass string
	Traits        []string
	Forbidden     []string
	Count         int
	Min           int
	Nodes         []int64
	Rule          string
	Level         string
	LevelIndex    int
	Sources       []string
}

// levelSources are the sources of levels[0..lvl] (coarse to fine; none
// when lvl < 0): the paths the lease reads compute down to level lvl
// (metalloc_topology_path, migration 00056), all that a domain of the
// level needs.
func levelSources(levels []topology.Level, lvl int) []string {
	out := []string{}
	for _, l := range levels[:lvl+1] {
		out = append(out, l.Source)
	}
	return out
}

// least is the fewest nodes r may book: Min when set below Count, else
// Count.
func (r Reservation) least() int {
	if r.Min > 0 && r.Min < r.Count {
		return r.Min
	}
	return r.Count
}

// pick is the outcome of choosing nodes for one reservation: the nodes'
// ids and, under a rule, the domain they are all in (nil when they span).
type pick struct {
	IDs    []int64
	Domain []string
}

// choose picks r.Count nodes among nodes for the window [from, to): the
// eligible ones free over it and not in taken (picked by the lease's
// earlier reservations). Under rule required they are all in the domain
// of the level with the most such nodes (ties: at random when rnd is set,
// else the first by name); under preferred in that domain when it has
// enough, else from the domains with the most first; otherwise anywhere.
// Within a domain, among the nodes in no domain, and without a rule, the
// nodes are drawn at random (rnd set: concurrent admissions on one pool
// then rarely collide) or in id order. ok is false when they do not fit.
func choose(nodes []node, r Reservation, from, to int64, taken map[int64]bool, rnd *rand.Rand) (p pick, ok bool) {
	byDomain := map[string][]int64{}
	var names []string
	var all []int64
	for i := range nodes {
		n := &nodes[i]
		if !n.Eligible || taken[n.ID] || !n.freeOver(from, to) {
			continue
		}
		all = append(all, n.ID)
		if r.LevelIndex < 0 {
			continue
		}
		if name, in := n.domain(r.LevelIndex); in {
			if byDomain[name] == nil {
				names = append(names, name)
			}
			byDomain[name] = append(byDomain[name], n.ID)
		}
	}
	shuffle := func(ids []int64) {
		if rnd != nil {
			rnd.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		}
	}
	slices.Sort(names)
	if rnd != nil {
		rnd.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	}
	// Most free first; a stable sort keeps the shuffled (or name) order among ties.
	slices.SortStableFunc(names, func(a, b string) int { return len(byDomain[b]) - len(byDomain[a]) })
	switch {
	case r.Rule == RuleNone || r.LevelIndex < 0:
		n := min(len(all), r.Count)
		if n < r.least() {
			return p, false
		}
		shuffle(all)
		return pick{IDs: all[:n]}, true
	case len(names) > 0 && len(byDomain[names[0]]) >= r.Count,
		r.Rule == RuleRequired && len(names) > 0 && len(byDomain[names[0]]) >= r.least():
		ids := byDomain[names[0]]
		shuffle(ids)
		return pick{IDs: ids[:min(len(ids), r.Count)], Domain: strings.Split(names[0], "/")}, true
	case r.Rule == RulePreferred:
		// As few domains as possible: the fullest first, then nodes in
		// no domain of the level.
		var ids []int64
		inDomain := map[int64]bool{}
		for _, name := range names {
			d := byDomain[name]
			shuffle(d)
			for _, id := range d {
				inDomain[id] = true
			}
			ids = append(ids, d...)
		}
		var rest []int64
		for _, id := range all {
			if !inDomain[id] {
				rest = append(rest, id)
			}
		}
		shuffle(rest)
		ids = append(ids, rest...)
		if len(ids) < r.Count {
			return p, false
		}
		return pick{IDs: ids[:r.Count]}, true
	}
	return p, false
}

// chooseAll picks every reservation of rs in order for [from, to), each
// among the nodes of its own class (nodes[i] for rs[i]), no node twice.
// failed is the index of the first reservation that does not fit (-1
// when all do).
func chooseAll(nodes [][]node, rs []Reservation, from, to int64, rnd *rand.Rand) (picks []pick, failed int) {
	taken := map[int64]bool{}
	picks = make([]pick, len(rs))
	for i, r := range rs {
		p, ok := choose(nodes[i], r, from, to, taken, rnd)
		if !ok {
			return nil, i
		}
		for _, id := range p.IDs {
			taken[id] = true
		}
		picks[i] = p
	}
	return picks, -1
}

// earliestAll is the first start in [after, horizon] at which every
// reservation of rs fits for dur seconds (chooseAll, deterministic), or
// ok false. Each reservation alone cannot start before its own earliest
// (the sweep), so the search starts at the latest of those; from there
// the candidates are that start and the ends of busy intervals after it:
// a window that does not fit at s fits no earlier than the next end of an
// interval (whole seconds, half-open windows).
func earliestAll(nodes [][]node, rs []Reservation, after, dur, horizon int64) (int64, bool) {
	lower := after
	for i, r := range rs {
		s, _, _, ok := earliest(nodes[i], r.least(), levelFor(r), after, dur, horizon)
		if !ok {
			return 0, false
		}
		lower = max(lower, s)
	}
	cands := []int64{lower}
	for _, ns := range nodes {
		for _, n := range ns {
			for _, b := range n.Busy {
				if b.To > lower && b.To <= horizon {
					cands = append(cands, b.To)
				}
			}
		}
	}
	slices.Sort(cands)
	cands = slices.Compact(cands)
	for _, s := range cands {
		if _, failed := chooseAll(nodes, rs, s, s+dur, nil); failed < 0 {
			return s, true
		}
	}
	return 0, false
}

// levelFor is the level index the sweep groups by for r: its level under
// rule required, else none (preferred and none take nodes anywhere).
func levelFor(r Reservation) int {
	if r.Rule == RuleRequired {
		return r.LevelIndex
	}
	return -1
}

// refusal words why reservation r (number i, from 1) does not fit over
// [from, to), per filter, as allocations' no-fit details do: "reservation
// 1 (16 of baremetal-gpu with CUSTOM_A100, in one rack): 40 reservable
// nodes of baremetal-gpu, 38 not in maintenance, 20 with the traits asked,
// 12 of them free from ... to ...; at most 5 in one rack (rack 1/r03)".
func refusal(i int, r Reservation, nodes []node, taken map[int64]bool, from, to int64) string {
	var reservable, up, fitting, free, other int
	byDomain := map[string]int{}
	for k := range nodes {
		n := &nodes[k]
		reservable++
		if n.Maint {
			continue
		}
		up++
		if !n.Fits {
			continue
		}
		fitting++
		if !n.freeOver(from, to) {
			continue
		}
		if taken[n.ID] {
			other++
			continue
		}
		free++
		if name, in := n.domain(r.LevelIndex); in && r.LevelIndex >= 0 {
			byDomain[name]++
		}
	}
	want := fmt.Sprintf("%d %s", r.Count, topology.Describe(r.ResourceClass, r.Traits))
	if r.least() < r.Count {
		want = fmt.Sprintf("%d to %s", r.least(), want)
	}
	if len(r.Forbidden) > 0 {
		want += " without " + strings.Join(r.Forbidden, ", ")
	}
	if r.Rule == RuleRequired {
		want += ", in one " + r.Level
	}
	parts := []string{fmt.Sprintf("%d reservable nodes of %s", reservable, r.ResourceClass),
		fmt.Sprintf("%d not in maintenance", up)}
	switch {
	case r.Nodes != nil:
		parts = append(parts, fmt.Sprintf("%d with the traits and properties asked", fitting))
	case len(r.Traits)+len(r.Forbidden) > 0:
		parts = append(parts, fmt.Sprintf("%d with the traits asked", fitting))
	}
	parts = append(parts, fmt.Sprintf("%d of them free from %s to %s", free+other,
		fromUnix(from).Format(time.RFC3339), fromUnix(to).Format(time.RFC3339)))
	if other > 0 {
		parts = append(parts, fmt.Sprintf("%d of those taken by this lease's earlier reservations", other))
	}
	msg := fmt.Sprintf("reservation %d (%s): %s", i+1, want, strings.Join(parts, ", "))
	if r.Rule == RuleRequired && r.LevelIndex >= 0 && free >= r.least() {
		best, bestName := 0, ""
		for name, c := range byDomain {
			if c > best || c == best && name < bestName {
				best, bestName = c, name
			}
		}
		if best == 0 {
			msg += fmt.Sprintf("; none of them in a %s", r.Level)
		} else {
			msg += fmt.Sprintf("; at most %d in one %s (%s %s)", best, r.Level, r.Level, bestName)
		}
	}
	return msg
}
