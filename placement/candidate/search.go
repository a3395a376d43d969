package candidate

import (
	"encoding/binary"
	"slices"
	"sort"
)

// cSearch is the request-wide state.
type cSearch struct {
	req        *Request
	groups     []*cGroupQ
	classNames map[int32]string
	hasTrees   bool
	hasSharing bool
	anchorIn   map[int64]bool // batch restriction (nil for all)
	arena      cArena
	rootReq    []int64
	rootForb   []int64
	sharingID  int64 // trait id of MISC_SHARES_VIA_AGGREGATE (-1 if none)
	traitNames map[int64]string
	// usage is the usage of the inventories of the worlds searched (by
	// cInv.ix).
	usage []int64
	// cap is the most candidates one search passes on (0: all), so that
	// a limited request costs its limit, not the product of its groups.
	cap int
	// max is the most candidates a pass over the request generates (0:
	// no bound), Placement's max_allocation_candidates (Finder.SetMax);
	// generated counts them.
	max, generated int
	// rotate is where the walk of roots starts (randomized limited
	// requests: a random root, wrapping around).
	rotate int
	// merged is the candidate merge builds, reused: a search passes it
	// on and builds the next one in it (sinks that keep one clone it).
	merged cAreq
}

// atMax reports whether the request generated its most candidates.
func (s *cSearch) atMax() bool { return s.max > 0 && s.generated >= s.max }

// rotated is list starting at s.rotate (modulo its length), wrapping.
func (s *cSearch) rotated(list []*cProv) []*cProv {
	if s.rotate == 0 || len(list) == 0 {
		return list
	}
	k := s.rotate % len(list)
	return append(append(make([]*cProv, 0, len(list)), list[k:]...), list[:k]...)
}

func (s *cSearch) anchorOK(w *cWorld, root int64) bool {
	if s.anchorIn != nil && !s.anchorIn[root] {
		return false
	}
	if len(s.rootReq) == 0 && len(s.rootForb) == 0 {
		return true
	}
	r := w.get(root)
	if r == nil || r.parent != 0 {
		return false
	}
	for _, t := range s.rootReq {
		if !r.hasTrait(t) {
			return false
		}
	}
	for _, t := range s.rootForb {
		if r.hasTrait(t) {
			return false
		}
	}
	return true
}

// search matches every group in w, merges them and passes the candidates,
// in order, to sink, which returns false to stop the search. A candidate
// is only valid during the call (clone what is kept). seen dedups merged
// candidates (also across batches); the walk stops at the cap and the max.
func (s *cSearch) search(w *cWorld, seen map[string]bool, sink func(*cAreq) bool) {
	groupAreqs := func(gi int, emit func(*cAreq) bool) {
		g := s.groups[gi]
		if g.SameProvider || len(g.classes) == 0 {
			s.singleProvider(w, gi, g, emit)
			return
		}
		s.multiProvider(w, gi, g, emit)
	}
	c := emitter{s: s, seen: seen, sink: sink}
	if len(s.groups) == 1 {
		// One group: its requests are the candidates, up to the cap.
		groupAreqs(0, func(a *cAreq) bool {
			a.one[0] = a.provs
			a.mappings = a.one[:]
			return c.add(a)
		})
		return
	}
	perGroup := make([]map[int64][]*cAreq, len(s.groups))
	for gi := range s.groups {
		var areqs []*cAreq
		groupAreqs(gi, func(a *cAreq) bool { areqs = append(areqs, a); return true })
		if len(areqs) == 0 {
			return
		}
		m := map[int64][]*cAreq{}
		for _, a := range areqs {
			m[a.anchor] = append(m[a.anchor], a)
		}
		perGroup[gi] = m
	}
	var anchors []int64
	for a := range perGroup[0] {
		ok := true
		for _, m := range perGroup[1:] {
			if len(m[a]) == 0 {
				ok = false
				break
			}
		}
		if ok {
			anchors = append(anchors, a)
		}
	}
	sort.Slice(anchors, func(i, j int) bool { return anchors[i] < anchors[j] })
	if s.rotate > 0 && len(anchors) > 0 {
		k := s.rotate % len(anchors)
		anchors = append(anchors[k:], anchors[:k]...)
	}
	numGranular := 0
	for _, g := range s.groups {
		if g.SameProvider {
			numGranular++
		}
	}
	isolate := s.req.GroupPolicy == "isolate" && numGranular > 0
	lists := make([][]*cAreq, len(s.groups))
	pick := make([]*cAreq, len(s.groups))
	// The combinations of one request per group, depth first in the
	// order of the lists (the first group varies slowest). With isolate,
	// a branch whose granular groups already share a provider is cut
	// where it starts, and the walk stops at the cap: a limited request
	// on wide trees (Placement bug 2070257) costs its limit, not the
	// product of the groups.
	var walk func(gi int, anchor int64) bool
	walk = func(gi int, anchor int64) bool {
		if gi == len(lists) {
			a := s.merge(w, anchor, pick, numGranular, &s.merged)
			if a == nil {
				return true
			}
			return c.add(a)
		}
		granular := isolate && s.groups[gi].SameProvider
	next:
		for _, c := range lists[gi] {
			if granular {
				for gj := 0; gj < gi; gj++ {
					if s.groups[gj].SameProvider && pick[gj].provs[0] == c.provs[0] {
						continue next
					}
				}
			}
			pick[gi] = c
			if !walk(gi+1, anchor) {
				return false
			}
		}
		return true
	}
	for _, anchor := range anchors {
		for gi := range s.groups {
			lists[gi] = perGroup[gi][anchor]
		}
		if !walk(0, anchor) {
			break
		}
	}
}

// collect is search keeping every candidate (clones).
func (s *cSearch) collect(w *cWorld, seen map[string]bool) []*cAreq {
	var out []*cAreq
	s.search(w, seen, func(a *cAreq) bool {
		out = append(out, a.clone())
		return true
	})
	return out
}

// clone is a copy of a that the search will not reuse (the providers'
// slices are shared: nothing changes them once made).
func (a *cAreq) clone() *cAreq {
	c := &cAreq{anchor: a.anchor, provs: a.provs, group: a.group}
	c.rrs = append(make([]cRR, 0, len(a.rrs)), a.rrs...)
	c.mappings = append(make([][]*cProv, 0, len(a.mappings)), a.mappings...)
	return c
}

// emitter passes the candidates of a search on to its sink: a request made
// only of sharing providers once (seen, also across batches), none past
// the search's cap or the request's max.
type emitter struct {
	s      *cSearch
	seen   map[string]bool
	keyBuf []byte
	n      int // passed on by this search
	sink   func(*cAreq) bool
}

// add passes a on unless seen, and tells whether to go on (the sink wants
// more, the cap and the max not reached).
func (c *emitter) add(a *cAreq) bool {
	if c.s.atMax() {
		return false
	}
	if a.needsKey() {
		c.keyBuf = a.key(c.keyBuf)
		if c.seen[string(c.keyBuf)] {
			return true
		}
		c.seen[string(c.keyBuf)] = true
	}
	c.n++
	c.s.generated++
	if !c.sink(a) {
		return false
	}
	return !(c.s.cap > 0 && c.n >= c.s.cap) && !c.s.atMax()
}

// merge combines one allocation request per group into m (its slices
// reused), applying group_policy, same_subtree and the final capacity
// check; it returns m, or nil when they fail.
func (s *cSearch) merge(w *cWorld, anchor int64, pick []*cAreq, numGranular int, m *cAreq) *cAreq {
	if s.req.GroupPolicy == "isolate" && numGranular > 0 {
		// The granular groups' providers are all different.
		for gi, a := range pick {
			if !s.groups[gi].SameProvider {
				continue
			}
			for gj := 0; gj < gi; gj++ {
				if s.groups[gj].SameProvider && pick[gj].provs[0] == a.provs[0] {
					return nil
				}
			}
		}
	}
	for _, set := range s.req.SameSubtrees {
		var ps []*cProv
		for gi, a := range pick {
			if slices.Contains(set, s.groups[gi].Suffix) {
				for _, p := range a.provs {
					if !containsProv(ps, p) {
						ps = append(ps, p)
					}
				}
			}
		}
		if !sameSubtree(w, ps) {
			return nil
		}
	}
	m.anchor, m.group, m.provs = anchor, 0, nil
	m.rrs = m.rrs[:0]
	if cap(m.mappings) < len(pick) {
		m.mappings = make([][]*cProv, len(pick))
	}
	m.mappings = m.mappings[:len(pick)]
	for gi, a := range pick {
		m.mappings[gi] = a.provs
		for _, rr := range a.rrs {
			merged := false
			for i := range m.rrs {
				if m.rrs[i].p == rr.p && m.rrs[i].rc == rr.rc {
					m.rrs[i].amount += rr.amount
					merged = true
					break
				}
			}
			if !merged {
				m.rrs = append(m.rrs, rr)
			}
		}
	}
	for _, rr := range m.rrs {
		inv := rr.p.invFor(rr.rc)
		if s.usage[inv.ix]+rr.amount > inv.capacity() || rr.amount > int64(inv.maxUnit) {
			return nil
		}
	}
	return m
}

func containsProv(list []*cProv, p *cProv) bool {
	for _, x := range list {
		if x == p {
			return true
		}
	}
	return false
}

// sameSubtree tells whether one of ps is an ancestor (or self) of all.
func sameSubtree(w *cWorld, ps []*cProv) bool {
	if len(ps) <= 1 {
		return true
	}
	for _, cand := range ps {
		all := true
		for _, p := range ps {
			if !isAncestor(w, cand, p) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func isAncestor(w *cWorld, anc, p *cProv) bool {
	for p != nil {
		if p == anc {
			return true
		}
		if p.parent == 0 {
			return false
		}
		p = w.get(p.parent)
	}
	return false
}

// key identifies a merged request: its amounts (by provider and class)
// and mappings, in a compact binary form.
func (a *cAreq) key(buf []byte) []byte {
	rrs := a.rrs
	if !sort.SliceIsSorted(rrs, func(i, j int) bool { return rrLess(rrs[i], rrs[j]) }) {
		rrs = append([]cRR(nil), rrs...)
		sort.Slice(rrs, func(i, j int) bool { return rrLess(rrs[i], rrs[j]) })
	}
	buf = buf[:0]
	for _, rr := range rrs {
		buf = binary.AppendUvarint(buf, uint64(rr.p.id))
		buf = binary.AppendUvarint(buf, uint64(rr.rc))
		buf = binary.AppendUvarint(buf, uint64(rr.amount))
	}
	for _, ps := range a.mappings {
		buf = append(buf, 0xff)
		if len(ps) == 1 {
			buf = binary.AppendUvarint(buf, uint64(ps[0].id))
			continue
		}
		ids := make([]int64, len(ps))
		for i, p := range ps {
			ids[i] = p.id
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			buf = binary.AppendUvarint(buf, uint64(id))
		}
	}
	return buf
}

func rrLess(a, b cRR) bool {
	if a.p.id != b.p.id {
		return a.p.id < b.p.id
	}
	return a.rc < b.rc
}

// traitsOK checks required (ANDed any-of sets, against the union of the
// providers' traits) and forbidden traits (on none of them).
func traitsOK(ps []*cProv, required [][]int64, forbidden []int64) bool {
	for _, p := range ps {
		for _, t := range forbidden {
			if p.hasTrait(t) {
				return false
			}
		}
	}
	for _, set := range required {
		found := false
		for _, t := range set {
			for _, p := range ps {
				if p.hasTrait(t) {
					found = true
					break
				}
			}
			if found {
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// singleProvider matches a group whose resources come from one provider
// (granular groups; resourceless groups), as Placement's
// get_provider_ids_matching and _alloc_candidates_single_provider.
func (s *cSearch) singleProvider(w *cWorld, gi int, g *cGroupQ, emit func(*cAreq) bool) {
	if len(g.classes) == 0 && len(g.requiredIDs) == 0 && len(g.MemberOf) == 0 {
		// Placement finds nothing for a group without any filter.
		return
	}
	for _, p := range s.rotated(w.order) {
		if len(g.classes) > 0 && g.inTreeRoot != 0 && p.root != g.inTreeRoot {
			continue
		}
		ok := true
		for _, c := range g.classes {
			inv := p.invFor(c.rc)
			if inv == nil || !inv.fits(s.usage[inv.ix], c.amount) {
				ok = false
				break
			}
		}
		if !ok || !traitsOK([]*cProv{p}, g.requiredIDs, g.forbiddenIDs) {
			continue
		}
		if len(g.MemberOf) > 0 && !p.inAllAggs(g.MemberOf) {
			continue
		}
		if len(g.ForbiddenAggs) > 0 && p.inAnyAgg(g.ForbiddenAggs) {
			continue
		}
		rrs := make([]cRR, len(g.classes))
		for i, c := range g.classes {
			rrs[i] = cRR{p: p, rc: c.rc, amount: c.amount}
		}
		provs := []*cProv{p}
		if s.anchorOK(w, p.root) {
			if !emit(&cAreq{anchor: p.root, rrs: rrs, provs: provs, group: gi}) {
				return
			}
		}
		if p.sharing {
			for _, a := range w.sharingAnchors[p.id] {
				if a != p.root && s.anchorOK(w, a) {
					if !emit(&cAreq{anchor: a, rrs: rrs, provs: provs, group: gi}) {
						return
					}
				}
			}
		}
	}
}

// multiProvider matches the unsuffixed group: each class from any provider
// of a tree or from a sharing provider in an aggregate with it, as
// Placement's get_trees_matching_all and
// _alloc_candidates_multiple_providers. Trees are taken one at a time (in
// root id order) as anchors.
func (s *cSearch) multiProvider(w *cWorld, gi int, g *cGroupQ, emit func(*cAreq) bool) {
	// Sharing providers by the anchors they serve.
	var sharingAt [][]*cProv // by the anchor's position in w.order
	if g.inTreeRoot == 0 {
		for _, p := range w.order {
			if !p.sharing {
				continue
			}
			if len(g.MemberOf) > 0 && !p.inAllAggs(g.MemberOf) {
				continue
			}
			for _, a := range w.sharingAnchors[p.id] {
				if a == p.root {
					continue
				}
				ap := w.get(a)
				if ap == nil {
					continue
				}
				if sharingAt == nil {
					sharingAt = make([][]*cProv, len(w.order))
				}
				sharingAt[ap.ix] = append(sharingAt[ap.ix], p)
			}
		}
	}
	lists := make([][]*cProv, len(g.classes))
	idx := make([]int, len(g.classes))
	combo := make([]*cProv, len(g.classes))
	for _, root := range s.rotated(w.rootOrder) {
		if g.inTreeRoot != 0 && root.id != g.inTreeRoot {
			continue
		}
		if !s.anchorOK(w, root.id) {
			continue
		}
		anchorInAggs := len(g.MemberOf) == 0 || root.inAllAggs(g.MemberOf)
		anchorForbidden := len(g.ForbiddenAggs) > 0 && root.inAnyAgg(g.ForbiddenAggs)
		if anchorForbidden {
			continue
		}
		ok := true
		for ci, c := range g.classes {
			l := lists[ci][:0]
			consider := func(p *cProv) {
				inv := p.invFor(c.rc)
				if inv == nil || !inv.fits(s.usage[inv.ix], c.amount) {
					return
				}
				if !anchorInAggs && !p.inAllAggs(g.MemberOf) {
					return
				}
				if len(g.ForbiddenAggs) > 0 && p.inAnyAgg(g.ForbiddenAggs) {
					return
				}
				l = append(l, p)
			}
			for _, p := range root.tree {
				consider(p)
			}
			var shared []*cProv
			if sharingAt != nil {
				shared = sharingAt[root.ix]
			}
			for _, p := range shared {
				consider(p)
			}
			lists[ci] = l
			if len(l) == 0 {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		for ci := range idx {
			idx[ci] = 0
		}
		for {
			for ci := range lists {
				combo[ci] = lists[ci][idx[ci]]
			}
			if traitsOK(combo, g.requiredIDs, g.forbiddenIDs) {
				a := s.arena.areq()
				a.anchor, a.group = root.id, gi
				a.rrs = s.arena.rrSlice(len(combo))
				a.provs = s.arena.provSlice(len(combo))
				for ci, p := range combo {
					a.rrs[ci] = cRR{p: p, rc: g.classes[ci].rc, amount: g.classes[ci].amount}
					if !containsProv(a.provs, p) {
						a.provs = append(a.provs, p)
					}
				}
				if !emit(a) {
					return
				}
			}
			ci := len(lists) - 1
			for ; ci >= 0; ci-- {
				idx[ci]++
				if idx[ci] < len(lists[ci]) {
					break
				}
				idx[ci] = 0
			}
			if ci < 0 {
				break
			}
		}
	}
}
