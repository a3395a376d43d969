package topology

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// genFleet makes a random fleet of candidates under 1 to 3 levels: a
// random tree of domains of random sizes, some nodes missing values.
func genFleet(rng *rand.Rand) ([]Level, []Candidate) {
	nl := 1 + rng.IntN(3)
	levels := make([]Level, nl)
	for i := range levels {
		levels[i] = Level{Name: "l" + strconv.Itoa(i), Source: "extra.l" + strconv.Itoa(i)}
	}
	var cands []Candidate
	id := int64(1)
	var grow func(prefix []string)
	grow = func(prefix []string) {
		if len(prefix) == nl {
			for range rng.IntN(12) {
				cands = append(cands, Candidate{ID: id, Path: slices.Clone(prefix)})
				id++
			}
			return
		}
		for i := range 1 + rng.IntN(4) {
			grow(append(slices.Clone(prefix), strconv.Itoa(i+1)))
		}
	}
	grow(nil)
	// Some nodes miss a value from some level on.
	for i := range cands {
		if rng.IntN(10) == 0 {
			for l := rng.IntN(nl); l < nl; l++ {
				cands[i].Path[l] = ""
			}
		}
	}
	rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	return levels, cands
}

// bruteDomains counts, by brute force, the candidates of every domain at
// level l (all values up to l set) whose path starts with within.
func bruteDomains(cands []Candidate, l int, within []string) map[string]int {
	out := map[string]int{}
	for _, c := range cands {
		ok := true
		for i := 0; i <= l; i++ {
			if value(c, i) == "" {
				ok = false
			}
		}
		for i, v := range within {
			if value(c, i) != v {
				ok = false
			}
		}
		if ok {
			out[DomainName(c.Path[:l+1])]++
		}
	}
	return out
}

func TestChooseProperties(t *testing.T) {
	seeds := 3000
	if testing.Short() {
		seeds = 300
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		levels, cands := genFleet(rng)
		req := Request{Count: 1 + rng.IntN(max(1, len(cands)/2+3)), Level: rng.IntN(len(levels))}
		req.Rule = []Rule{None, Required, Preferred}[rng.IntN(3)]
		if req.Rule == Required && rng.IntN(4) == 0 && len(cands) > 0 {
			c := cands[rng.IntN(len(cands))]
			req.Within = slices.Clone(c.Path[:rng.IntN(req.Level+1)+1])
		}
		if req.Rule == Preferred && rng.IntN(3) == 0 && len(cands) > 0 {
			req.Prefer = slices.Clone(cands[rng.IntN(len(cands))].Path[:req.Level+1])
		}
		orig := slices.Clone(cands)
		plans, nf := Choose(levels, cands, req, rng)
		where := fmt.Sprintf("seed %d: %d candidates, %d levels, request %+v", seed, len(cands), len(levels), req)
		if !slices.EqualFunc(orig, cands, func(a, b Candidate) bool { return a.ID == b.ID && slices.Equal(a.Path, b.Path) }) {
			t.Fatalf("%s: Choose modified its candidates", where)
		}
		checkPlans(t, where, cands, req, plans)
		switch req.Rule {
		case Required:
			checkRequired(t, where, cands, req, plans, nf)
		case Preferred:
			checkPreferred(t, where, levels, cands, req, plans, nf)
		case None:
			checkNone(t, where, levels, cands, req, plans, nf)
		}
	}
}

// checkPlans: every plan holds distinct candidates, Count + Spare of them.
func checkPlans(t *testing.T, where string, cands []Candidate, req Request, plans []Plan) {
	t.Helper()
	ids := map[int64]bool{}
	for _, c := range cands {
		ids[c.ID] = true
	}
	for _, p := range plans {
		if p.Spare < 0 || len(p.Nodes) != req.Count+p.Spare {
			t.Fatalf("%s: plan %v has %d nodes, spare %d", where, p.Domain, len(p.Nodes), p.Spare)
		}
		seen := map[int64]bool{}
		for _, n := range p.Nodes {
			if !ids[n.ID] || seen[n.ID] {
				t.Fatalf("%s: plan %v: node %d unknown or twice", where, p.Domain, n.ID)
			}
			seen[n.ID] = true
		}
	}
}

func checkRequired(t *testing.T, where string, cands []Candidate, req Request, plans []Plan, nf *NoFit) {
	t.Helper()
	doms := bruteDomains(cands, req.Level, req.Within)
	fitting, best, bestFree := 0, -1, 0
	for _, n := range doms {
		if n >= req.Count {
			fitting++
			if best < 0 || n-req.Count < best {
				best = n - req.Count
			}
		}
		bestFree = max(bestFree, n)
	}
	if fitting == 0 {
		if nf == nil {
			t.Fatalf("%s: plans %v, brute force finds no domain", where, domains(plans))
		}
		if nf.BestFree != bestFree {
			t.Fatalf("%s: NoFit best %d, brute force %d (%s)", where, nf.BestFree, bestFree, nf)
		}
		return
	}
	if nf != nil {
		t.Fatalf("%s: %v, brute force finds %d domains", where, nf, fitting)
	}
	if len(plans) != fitting {
		t.Fatalf("%s: %d plans, brute force %d domains", where, len(plans), fitting)
	}
	if plans[0].Spare != best {
		t.Fatalf("%s: best plan spare %d, brute force %d", where, plans[0].Spare, best)
	}
	for i, p := range plans {
		if len(p.Domain) != req.Level+1 || doms[DomainName(p.Domain)] != len(p.Nodes) {
			t.Fatalf("%s: plan %v with %d nodes, brute force %d", where, p.Domain, len(p.Nodes), doms[DomainName(p.Domain)])
		}
		if i > 0 && p.Spare < plans[i-1].Spare {
			t.Fatalf("%s: plans not best first: %v", where, domains(plans))
		}
		for _, n := range p.Nodes {
			if !under(n, p.Domain) || !under(n, req.Within) {
				t.Fatalf("%s: required plan %v spans domains: node %v", where, p.Domain, n.Path)
			}
		}
	}
}

func checkPreferred(t *testing.T, where string, levels []Level, cands []Candidate, req Request, plans []Plan, nf *NoFit) {
	t.Helper()
	if len(cands) < req.Count {
		if nf == nil {
			t.Fatalf("%s: plans with %d candidates", where, len(cands))
		}
		return
	}
	if nf != nil || len(plans) == 0 {
		t.Fatalf("%s: %v", where, nf)
	}
	if last := plans[len(plans)-1]; len(last.Nodes) != len(cands) || last.Domain != nil {
		t.Fatalf("%s: last plan %v has %d of %d nodes", where, last.Domain, len(last.Nodes), len(cands))
	}
	doms := bruteDomains(cands, req.Level, nil)
	best := -1
	for _, n := range doms {
		if n >= req.Count && (best < 0 || n-req.Count < best) {
			best = n - req.Count
		}
	}
	first := plans[0]
	if best >= 0 {
		// One domain when one fits: the best fit, unless a preferred one fits.
		if len(first.Domain) != req.Level+1 {
			t.Fatalf("%s: a domain fits, first plan is %v", where, first.Domain)
		}
		for _, n := range first.Nodes {
			if !under(n, first.Domain) {
				t.Fatalf("%s: first plan %v spans: %v", where, first.Domain, n.Path)
			}
		}
		if len(req.Prefer) == 0 && first.Spare != best {
			t.Fatalf("%s: first plan spare %d, brute force %d", where, first.Spare, best)
		}
		return
	}
	if req.Level == 0 || len(req.Prefer) > 0 {
		return
	}
	// No domain fits: the fewest domains under one parent, by brute force.
	bestK := -1
	for parent := range bruteDomains(cands, req.Level-1, nil) {
		var sizes []int
		for d, n := range doms {
			if len(d) > len(parent) && d[:len(parent)+1] == parent+"/" {
				sizes = append(sizes, n)
			}
		}
		slices.SortFunc(sizes, func(a, b int) int { return cmp.Compare(b, a) })
		k, sum := 0, 0
		for _, n := range sizes {
			if sum < req.Count {
				k, sum = k+1, sum+n
			}
		}
		if sum >= req.Count && (bestK < 0 || k < bestK) {
			bestK = k
		}
	}
	if bestK < 0 {
		if len(plans) != 1 {
			t.Fatalf("%s: no parent holds the group, plans %v", where, domains(plans))
		}
		return
	}
	if len(first.Domain) != req.Level {
		t.Fatalf("%s: first plan %v, want a domain of level %d", where, first.Domain, req.Level-1)
	}
	used := map[string]bool{}
	for _, n := range first.Nodes[:req.Count] {
		if !under(n, first.Domain) {
			t.Fatalf("%s: span plan %v holds %v", where, first.Domain, n.Path)
		}
		used[DomainName(n.Path[:req.Level+1])] = true
	}
	if len(used) != bestK {
		t.Fatalf("%s: span uses %d domains, brute force %d", where, len(used), bestK)
	}
	_ = levels
}

func checkNone(t *testing.T, where string, levels []Level, cands []Candidate, req Request, plans []Plan, nf *NoFit) {
	t.Helper()
	if len(cands) < req.Count {
		if nf == nil {
			t.Fatalf("%s: plans with %d candidates", where, len(cands))
		}
		return
	}
	if nf != nil || len(plans) != 1 || len(plans[0].Nodes) != len(cands) {
		t.Fatalf("%s: %v, %d plans", where, nf, len(plans))
	}
	// When a domain of the finest level holds the group, the first Count
	// nodes are in the best-fitting one.
	l := len(levels) - 1
	best := -1
	doms := bruteDomains(cands, l, nil)
	for _, n := range doms {
		if n >= req.Count && (best < 0 || n < best) {
			best = n
		}
	}
	if best < 0 {
		return
	}
	first := plans[0].Nodes[0]
	for _, n := range plans[0].Nodes[:req.Count] {
		if !under(n, first.Path[:l+1]) {
			t.Fatalf("%s: first %d nodes span %v and %v", where, req.Count, first.Path, n.Path)
		}
	}
	if got := doms[DomainName(first.Path)]; got != best {
		t.Fatalf("%s: first nodes in a domain of %d, best fit %d", where, got, best)
	}
}
