package topology

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Rule is a group's placement rule (Kueue's topology-aware scheduling has
// the same three): the values are those of allocation_groups.rule.
type Rule string

// The placement rules.
const (
	// None: any Count candidates (in the best-fitting domain of the
	// finest level that holds them, when one does).
	None Rule = "none"
	// Required: all nodes in one domain of the request's level.
	Required Rule = "required"
	// Preferred: one domain of the level if any has room; else the
	// fewest domains of the level under one domain of the next coarser
	// level; else anywhere.
	Preferred Rule = "preferred"
)

// Request is what Choose places.
type Request struct {
	// Count is the number of nodes wanted (> 0).
	Count int
	// Rule is the placement rule ("" is None).
	Rule Rule
	// Level is the index in the levels of the rule's level (Required,
	// Preferred); see LevelIndex.
	Level int
	// Within, when set, is a path prefix every chosen node must have
	// (growing a required group: the domain it sits in).
	Within []string
	// Prefer, when set, is a path prefix whose domains come first
	// (growing a preferred group: where it sits already).
	Prefer []string
	// Describe words the candidates in NoFit's message, after "free
	// nodes": e.g. Describe("baremetal-gpu", traits).
	Describe string
}

// Plan is one way to place a request: the domain (its path prefix; nil
// when the plan is not inside one domain), all the candidates of the plan
// in the order to lock them (the caller locks the first Count it can,
// skipping nodes others took meanwhile), and Spare = len(Nodes) - Count.
type Plan struct {
	Domain []string
	Nodes  []Candidate
	Spare  int
}

// NoFit is Choose's error when no plan fits; Message explains it in one
// line, per domain, e.g. "no rack has 8 free nodes of baremetal-gpu with
// CUSTOM_A100: best is 1/07 with 6; 3 racks have 5" (an allocation
// group's last_error).
type NoFit struct {
	// Rule, Level (the level's name; "" for None) and Count are the
	// request's.
	Rule  Rule
	Level string
	Count int
	// Free is the number of candidates considered (after Within).
	Free int
	// Best is the domain with the most candidates (nil: none) and
	// BestFree its count.
	Best     []string
	BestFree int
	Message  string
}

func (e *NoFit) Error() string { return e.Message }

// Choose places req on cands (FreeCandidates' result under levels): the
// plans that fit, best first, or a NoFit.
//
//   - Required: one plan per domain at req.Level (with prefix req.Within)
//     holding at least Count candidates, best fit first (fewest spare
//     nodes, to keep large holes for large groups), in random order among
//     equals (rng) so that concurrent groups spread over equal domains.
//   - Preferred: the same plans when a domain fits; then, for each domain
//     of the next coarser level that has room, one plan spanning the
//     fewest of its domains (largest first); then one plan over the whole
//     fleet (largest domains first, nodes without a path last).
//   - None: one plan over every candidate, ordered so that the first
//     Count fill the best-fitting domain of the finest level where one
//     holds them (else the roomiest domains first).
//
// Inside a plan, nodes are ordered the same way at the finer levels. rng
// nil breaks ties by domain name; a *rand.Rand is not safe for concurrent
// use, so give each goroutine its own. Choose does not modify cands.
func Choose(levels []Level, cands []Candidate, req Request, rng *rand.Rand) ([]Plan, *NoFit) {
	c := chooser{levels: len(levels), rng: rng}
	rule := req.Rule
	if rule == "" {
		rule = None
	}
	lvl := ""
	if rule != None {
		if req.Level < 0 || req.Level >= len(levels) {
			return nil, &NoFit{Rule: rule, Count: req.Count, Free: len(cands),
				Message: fmt.Sprintf("no topology level %d: %d levels are configured", req.Level, len(levels))}
		}
		lvl = levels[req.Level].Name
	}
	if req.Count <= 0 {
		return nil, &NoFit{Rule: rule, Level: lvl, Count: req.Count, Free: len(cands),
			Message: fmt.Sprintf("invalid count %d: a group needs at least one node", req.Count)}
	}
	switch rule {
	case Required:
		return c.required(lvl, cands, req)
	case Preferred:
		return c.preferred(lvl, cands, req)
	case None:
		if len(cands) < req.Count {
			return nil, c.tooFew(rule, lvl, cands, req)
		}
		return []Plan{{Nodes: c.packed(cands, req.Count), Spare: len(cands) - req.Count}}, nil
	}
	return nil, &NoFit{Rule: rule, Count: req.Count, Free: len(cands),
		Message: fmt.Sprintf("invalid placement rule %q", rule)}
}

type chooser struct {
	levels int
	rng    *rand.Rand
}

// domain is the candidates sharing a path prefix.
type domain struct {
	path  []string
	nodes []Candidate
}

func value(c Candidate, i int) string {
	if i < len(c.Path) {
		return c.Path[i]
	}
	return ""
}

// under reports whether c's path starts with prefix (all values set).
func under(c Candidate, prefix []string) bool {
	for i, v := range prefix {
		if v == "" || value(c, i) != v {
			return false
		}
	}
	return true
}

// group splits cands into the domains of level l, in name order, and the
// candidates without a value at some level up to l.
func group(cands []Candidate, l int) (doms []*domain, rest []Candidate) {
	byKey := map[[MaxLevels]string]*domain{}
	n := min(l+1, MaxLevels) // levels are validated: at most MaxLevels
	for _, c := range cands {
		var key [MaxLevels]string
		ok := true
		for i := range n {
			if key[i] = value(c, i); key[i] == "" {
				ok = false
				break
			}
		}
		if !ok {
			rest = append(rest, c)
			continue
		}
		d := byKey[key]
		if d == nil {
			d = &domain{path: slices.Clone(key[:n])}
			byKey[key] = d
			doms = append(doms, d)
		}
		d.nodes = append(d.nodes, c)
	}
	slices.SortFunc(doms, func(a, b *domain) int { return slices.Compare(a.path, b.path) })
	return doms, rest
}

// sort orders s by cmp, random among equals when the chooser has an rng.
func sortRandom[T any](rng *rand.Rand, s []T, cmp func(a, b T) int) {
	if rng != nil {
		rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	}
	slices.SortStableFunc(s, cmp)
}

// order returns nodes (all in one domain down to level from-1) in the
// order to lock them for a group of count: at level from, the best-fitting
// domain first if one holds count, then the others largest first, nodes
// without a value at that level last; recursively below.
func (c chooser) order(nodes []Candidate, from, count int) []Candidate {
	out := make([]Candidate, 0, len(nodes))
	if from >= c.levels || len(nodes) <= 1 {
		out = append(out, nodes...)
		slices.SortFunc(out, func(a, b Candidate) int { return cmp.Compare(a.ID, b.ID) })
		return out
	}
	subs, rest := groupAt(nodes, from)
	sortRandom(c.rng, subs, func(a, b *domain) int { return cmp.Compare(len(b.nodes), len(a.nodes)) })
	// The best fit: the smallest that holds count (the last such in
	// largest-first order, the first of its equals), moved to the front.
	best := -1
	for i, d := range subs {
		if len(d.nodes) >= count && (best < 0 || len(d.nodes) < len(subs[best].nodes)) {
			best = i
		}
	}
	if best > 0 {
		d := subs[best]
		copy(subs[1:best+1], subs[:best])
		subs[0] = d
	}
	need := count
	for _, d := range subs {
		n := min(need, len(d.nodes))
		if n <= 0 {
			n = len(d.nodes)
		}
		out = append(out, c.order(d.nodes, from+1, n)...)
		need -= len(d.nodes)
	}
	slices.SortFunc(rest, func(a, b Candidate) int { return cmp.Compare(a.ID, b.ID) })
	return append(out, rest...)
}

// packed orders cands for the rule None: the best-fitting domain of the
// finest level where one holds count first, then the others as order
// puts them.
func (c chooser) packed(cands []Candidate, count int) []Candidate {
	for l := c.levels - 1; l >= 0; l-- {
		doms, _ := group(cands, l)
		var fit []*domain
		for _, d := range doms {
			if len(d.nodes) >= count {
				fit = append(fit, d)
			}
		}
		if len(fit) == 0 {
			continue
		}
		sortRandom(c.rng, fit, func(a, b *domain) int { return cmp.Compare(len(a.nodes), len(b.nodes)) })
		best := fit[0]
		in := make(map[int64]bool, len(best.nodes))
		for _, n := range best.nodes {
			in[n.ID] = true
		}
		rest := make([]Candidate, 0, len(cands)-len(best.nodes))
		for _, n := range cands {
			if !in[n.ID] {
				rest = append(rest, n)
			}
		}
		return append(c.order(best.nodes, l+1, count), c.order(rest, 0, len(rest))...)
	}
	return c.order(cands, 0, count)
}

// groupAt splits nodes by their value at level l alone (they share the
// coarser ones).
func groupAt(nodes []Candidate, l int) (doms []*domain, rest []Candidate) {
	byVal := map[string]*domain{}
	for _, n := range nodes {
		v := value(n, l)
		if v == "" {
			rest = append(rest, n)
			continue
		}
		d := byVal[v]
		if d == nil {
			d = &domain{path: append(slices.Clone(n.Path[:l:l]), v)}
			byVal[v] = d
			doms = append(doms, d)
		}
		d.nodes = append(d.nodes, n)
	}
	slices.SortFunc(doms, func(a, b *domain) int { return slices.Compare(a.path, b.path) })
	return doms, rest
}

// fits returns the plans of the domains holding count, best fit first,
// those matching prefer (if any) before the others.
func (c chooser) fits(doms []*domain, req Request, prefer func([]string) bool) []Plan {
	var fit []*domain
	for _, d := range doms {
		if len(d.nodes) >= req.Count {
			fit = append(fit, d)
		}
	}
	sortRandom(c.rng, fit, func(a, b *domain) int {
		if pa, pb := prefer(a.path), prefer(b.path); pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		return cmp.Compare(len(a.nodes), len(b.nodes))
	})
	plans := make([]Plan, len(fit))
	for i, d := range fit {
		plans[i] = Plan{Domain: d.path, Nodes: c.order(d.nodes, len(d.path), req.Count), Spare: len(d.nodes) - req.Count}
	}
	return plans
}

func (c chooser) required(lvl string, cands []Candidate, req Request) ([]Plan, *NoFit) {
	in := cands
	if len(req.Within) > 0 {
		in = nil
		for _, n := range cands {
			if under(n, req.Within) {
				in = append(in, n)
			}
		}
	}
	doms, _ := group(in, req.Level)
	plans := c.fits(doms, req, func([]string) bool { return false })
	if len(plans) == 0 {
		return nil, c.noDomain(lvl, len(cands), in, doms, req)
	}
	return plans, nil
}

func (c chooser) preferred(lvl string, cands []Candidate, req Request) ([]Plan, *NoFit) {
	if len(cands) < req.Count {
		return nil, c.tooFew(Preferred, lvl, cands, req)
	}
	prefer := func(path []string) bool {
		if len(req.Prefer) == 0 {
			return false
		}
		for i := 0; i < len(path) && i < len(req.Prefer); i++ {
			if path[i] != req.Prefer[i] {
				return false
			}
		}
		return true
	}
	preferFirst := func(a, b *domain) int {
		if pa, pb := prefer(a.path), prefer(b.path); pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		return cmp.Compare(len(b.nodes), len(a.nodes))
	}
	doms, rest := group(cands, req.Level)
	plans := c.fits(doms, req, prefer)

	// Spanning the fewest domains of the level under one of the next
	// coarser level, for each coarser domain where no single one fits.
	if req.Level > 0 {
		type span struct {
			plan Plan
			k    int
			pref bool
		}
		var spans []span
		parents, _ := group(cands, req.Level-1)
		for _, p := range parents {
			if len(p.nodes) < req.Count {
				continue
			}
			subs, loose := groupAt(p.nodes, req.Level)
			sortRandom(c.rng, subs, preferFirst)
			k, sum, fitsOne := 0, 0, false
			for _, d := range subs {
				fitsOne = fitsOne || len(d.nodes) >= req.Count
				if sum < req.Count {
					k++
					sum += len(d.nodes)
				}
			}
			if fitsOne || sum < req.Count {
				continue
			}
			// The parent's nodes without a value at the level last.
			slices.SortFunc(loose, func(a, b Candidate) int { return cmp.Compare(a.ID, b.ID) })
			spans = append(spans, span{
				plan: Plan{Domain: p.path, Nodes: append(c.concat(subs, req.Count), loose...), Spare: len(p.nodes) - req.Count},
				k:    k, pref: prefer(p.path),
			})
		}
		sortRandom(c.rng, spans, func(a, b span) int {
			if a.pref != b.pref {
				if a.pref {
					return -1
				}
				return 1
			}
			return cmp.Or(cmp.Compare(a.k, b.k), cmp.Compare(a.plan.Spare, b.plan.Spare))
		})
		for _, s := range spans {
			plans = append(plans, s.plan)
		}
	}

	// Anywhere: the largest domains first, then nodes without a path.
	sortRandom(c.rng, doms, preferFirst)
	nodes := c.concat(doms, req.Count)
	slices.SortFunc(rest, func(a, b Candidate) int { return cmp.Compare(a.ID, b.ID) })
	nodes = append(nodes, rest...)
	plans = append(plans, Plan{Nodes: nodes, Spare: len(nodes) - req.Count})
	return plans, nil
}

// concat lists the nodes of doms in their order, each domain ordered for
// what is left of count.
func (c chooser) concat(doms []*domain, count int) []Candidate {
	var out []Candidate
	need := count
	for _, d := range doms {
		n := min(need, len(d.nodes))
		if n <= 0 {
			n = len(d.nodes)
		}
		out = append(out, c.order(d.nodes, len(d.path), n)...)
		need -= len(d.nodes)
	}
	return out
}

func describe(req Request) string {
	if req.Describe == "" {
		return ""
	}
	return " " + req.Describe
}

func plural(name string, n int) string {
	if n == 1 {
		return name
	}
	return name + "s"
}

func nodesWord(n int) string {
	if n == 1 {
		return "node"
	}
	return "nodes"
}

// tooFew is the NoFit of a rule that may span domains.
func (c chooser) tooFew(rule Rule, lvl string, cands []Candidate, req Request) *NoFit {
	return &NoFit{Rule: rule, Level: lvl, Count: req.Count, Free: len(cands),
		Message: fmt.Sprintf("not enough free nodes%s: %d wanted, %d free", describe(req), req.Count, len(cands))}
}

// noDomain is the NoFit of Required: per domain, the best and the next
// counts.
func (c chooser) noDomain(lvl string, all int, in []Candidate, doms []*domain, req Request) *NoFit {
	e := &NoFit{Rule: Required, Level: lvl, Count: req.Count, Free: len(in)}
	where := ""
	if len(req.Within) > 0 {
		where = " in " + DomainName(req.Within)
	}
	head := fmt.Sprintf("no %s%s has %d free %s%s", lvl, where, req.Count, nodesWord(req.Count), describe(req))
	switch {
	case all == 0:
		e.Message = head + ": none is free"
		return e
	case len(in) == 0:
		e.Message = fmt.Sprintf("%s: none of the %d free %s is in %s", head, all, nodesWord(all), DomainName(req.Within))
		return e
	case len(doms) == 0:
		e.Message = fmt.Sprintf("%s: none of the %d free %s is in a %s (its topology value is missing)", head, len(in), nodesWord(len(in)), lvl)
		return e
	}
	sorted := slices.Clone(doms)
	slices.SortStableFunc(sorted, func(a, b *domain) int { return cmp.Compare(len(b.nodes), len(a.nodes)) })
	e.Best, e.BestFree = sorted[0].path, len(sorted[0].nodes)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: best is %s with %d", head, DomainName(e.Best), e.BestFree)
	i := 1
	for i < len(sorted) && len(sorted[i].nodes) == e.BestFree {
		i++
	}
	if i > 1 {
		fmt.Fprintf(&b, " (as %s %d more %s)", map[bool]string{true: "is", false: "are"}[i == 2], i-1, plural(lvl, i-1))
	}
	if i < len(sorted) {
		n, j := len(sorted[i].nodes), i
		for j < len(sorted) && len(sorted[j].nodes) == n {
			j++
		}
		fmt.Fprintf(&b, "; %d %s %s %d", j-i, plural(lvl, j-i), map[bool]string{true: "has", false: "have"}[j-i == 1], n)
		if j < len(sorted) {
			fmt.Fprintf(&b, "; %d more %s fewer", len(sorted)-j, map[bool]string{true: "has", false: "have"}[len(sorted)-j == 1])
		}
	}
	e.Message = b.String()
	return e
}
