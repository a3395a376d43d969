package lease

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// span is a half-open interval [From, To) in Unix seconds.
type span struct{ From, To int64 }

// node is a reservable node as admission and availability see it: its
// id, uuid, name (MatchingNodes only), class, topology path (when read), whether it is eligible (fits the
// reservation's traits and is not in maintenance) and its busy intervals
// (the windows of other leases' blocking rows), sorted by start.
type node struct {
	ID    int64
	UUID  string
	Name  string
	Class string
	Path  []string
	// Keys, when set, is domainKey of Path at each level ("": in none;
	// the pool copy's, computed once per copy).
	Keys     []string
	Eligible bool
	Maint    bool
	Fits     bool
	Busy     []span
}

// toNodes turns MatchingNodes' rows into nodes, their busy intervals
// sorted by start.
func toNodes(rows []MatchingNodesRow) []node {
	out := make([]node, len(rows))
	for i, r := range rows {
		n := node{ID: r.ID, UUID: r.Uuid.String(), Class: r.ResourceClass, Path: r.Path,
			Maint: r.Maintenance, Fits: r.Fits, Eligible: r.Fits && !r.Maintenance}
		if r.Name != nil {
			n.Name = *r.Name
		}
		n.Busy = make([]span, 0, len(r.BusyFrom))
		for j := range r.BusyFrom {
			if j < len(r.BusyTo) {
				n.Busy = append(n.Busy, span{r.BusyFrom[j].Unix(), r.BusyTo[j].Unix()})
			}
		}
		slices.SortFunc(n.Busy, func(a, b span) int { return cmp.Compare(a.From, b.From) })
		out[i] = n
	}
	return out
}

// freeOver reports whether n has no busy interval overlapping [from, to).
func (n *node) freeOver(from, to int64) bool {
	for _, b := range n.Busy {
		if b.From >= to {
			return true // sorted by start: none later overlaps
		}
		if b.To > from {
			return false
		}
	}
	return true
}

// domain is domainKey(n.Path, lvl), from n.Keys when set.
func (n *node) domain(lvl int) (string, bool) {
	if lvl >= 0 && lvl < len(n.Keys) {
		return n.Keys[lvl], n.Keys[lvl] != ""
	}
	return domainKey(n.Path, lvl)
}

// domainKey is the name of the domain at level index lvl ("1/r03") of a
// node with path, or "" with false when the node has no value at that
// level or a coarser one (it is in no domain of the level). lvl < 0 is
// the whole fleet: "" with true.
func domainKey(path []string, lvl int) (string, bool) {
	if lvl < 0 {
		return "", true
	}
	if lvl >= len(path) {
		return "", false
	}
	for _, v := range path[:lvl+1] {
		if v == "" {
			return "", false
		}
	}
	return strings.Join(path[:lvl+1], "/"), true
}

// earliest is the first start s in [after, horizon] at which count
// eligible nodes of nodes are free over [s, s+dur), all in one domain of
// level lvl when lvl >= 0 (else anywhere), with the domain (the one with
// the most free nodes then, by name among ties) and its free nodes at s.
// ok is false when there is none by horizon.
//
// A sweep, O(intervals log intervals): a window starting at s overlaps a
// busy [b.From, b.To) iff s is in [b.From-dur+1, b.To) (whole seconds), so
// each node is blocked for starts in the union of those intervals; the
// free count per domain changes only at their ends and starts. Free counts
// only grow at ends, so once past after only the domains that gained a
// node need checking.
func earliest(nodes []node, count int, lvl int, after, dur, horizon int64) (start int64, domain string, free int, ok bool) {
	type event struct {
		at    int64
		key   int
		delta int
	}
	keys := map[string]int{}
	var names []string
	var total []int
	var events []event
	for i := range nodes {
		n := &nodes[i]
		if !n.Eligible {
			continue
		}
		name, in := n.domain(lvl)
		if !in {
			continue
		}
		k, seen := keys[name]
		if !seen {
			k = len(names)
			keys[name] = k
			names = append(names, name)
			total = append(total, 0)
		}
		total[k]++
		var cur span
		have := false
		flush := func() {
			if have && cur.To > after {
				events = append(events, event{max(cur.From, after), k, +1}, event{cur.To, k, -1})
			}
		}
		for _, b := range n.Busy {
			s := span{b.From - dur + 1, b.To}
			if have && s.From <= cur.To {
				cur.To = max(cur.To, s.To)
				continue
			}
			flush()
			cur, have = s, true
		}
		flush()
	}
	slices.SortFunc(events, func(a, b event) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return b.delta - a.delta // blocks before frees at one instant: net effect is the same
	})
	blocked := make([]int, len(names))
	best := func(cands []int) (int, bool) {
		b := -1
		for _, k := range cands {
			if f := total[k] - blocked[k]; f >= count && (b < 0 || f > total[b]-blocked[b] ||
				f == total[b]-blocked[b] && names[k] < names[b]) {
				b = k
			}
		}
		return b, b >= 0
	}
	all := make([]int, len(names))
	for k := range all {
		all[k] = k
	}
	i := 0
	for i < len(events) && events[i].at <= after {
		blocked[events[i].key] += events[i].delta
		i++
	}
	if after > horizon {
		return 0, "", 0, false
	}
	if k, fits := best(all); fits {
		return after, names[k], total[k] - blocked[k], true
	}
	for i < len(events) {
		at := events[i].at
		if at > horizon {
			break
		}
		var gained []int
		for ; i < len(events) && events[i].at == at; i++ {
			blocked[events[i].key] += events[i].delta
			if events[i].delta < 0 {
				gained = append(gained, events[i].key)
			}
		}
		if k, fits := best(gained); fits {
			return at, names[k], total[k] - blocked[k], true
		}
	}
	return 0, "", 0, false
}

// Capacity is one row of the availability calendar: the eligible nodes of
// a resource class in one topology domain (Domain "" without a level) and,
// per step, how many are free for the whole step.
type Capacity struct {
	ResourceClass string `json:"resource_class"`
	Domain        string `json:"domain"`
	Total         int    `json:"total"`
	Free          []int  `json:"free"`
}

// calendar is the free capacity per resource class and domain of level
// lvl over steps [after+i*step, after+(i+1)*step), i < steps: one pass
// over the busy intervals (a difference array per row), O(nodes +
// intervals + rows*steps). Rows are sorted by class, then domain.
func calendar(nodes []node, lvl int, after, step int64, steps int) []Capacity {
	idx := map[[2]string]int{}
	var rows []Capacity
	var diffs [][]int
	for i := range nodes {
		n := &nodes[i]
		if !n.Eligible {
			continue
		}
		name, in := n.domain(lvl)
		if !in {
			continue
		}
		key := [2]string{n.Class, name}
		r, seen := idx[key]
		if !seen {
			r = len(rows)
			idx[key] = r
			rows = append(rows, Capacity{ResourceClass: n.Class, Domain: name})
			diffs = append(diffs, make([]int, steps+1))
		}
		rows[r].Total++
		next := 0 // the first step this node is not yet counted busy in
		for _, b := range n.Busy {
			lo := int(max(0, (b.From-after)/step))
			if b.From < after {
				lo = 0
			}
			hi := int(min(int64(steps), (b.To-after+step-1)/step))
			lo = max(lo, next)
			if hi <= lo {
				continue
			}
			diffs[r][lo]++
			diffs[r][hi]--
			next = hi
		}
	}
	for r := range rows {
		rows[r].Free = make([]int, steps)
		busy := 0
		for s := range steps {
			busy += diffs[r][s]
			rows[r].Free[s] = rows[r].Total - busy
		}
	}
	slices.SortFunc(rows, func(a, b Capacity) int {
		if c := strings.Compare(a.ResourceClass, b.ResourceClass); c != 0 {
			return c
		}
		return strings.Compare(a.Domain, b.Domain)
	})
	return rows
}

// unix is t in whole seconds; fromUnix its inverse, in UTC.
func unix(t time.Time) int64     { return t.Unix() }
func fromUnix(s int64) time.Time { return time.Unix(s, 0).UTC() }
