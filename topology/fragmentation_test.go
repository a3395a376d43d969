package topology

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// churn runs a churn of groups on a fleet of 4 rows of 4 racks of 40
// nodes: groups of random sizes (1 to 32) arrive, required in one rack,
// and random groups leave, keeping about 75% of the nodes in use; each
// group takes Choose's best plan (best fit) or, with random set, a random
// fitting rack. It returns how many 32-node groups fit afterwards and how
// many free nodes there were then, the mean number of 32-node groups that
// fit while 70-75% of the nodes were in use (sampled after every event in
// that band, so that both policies are compared at the same load), and how
// many arrivals found no rack.
func churn(seed uint64, random bool) (r churnResult) {
	const rows, racks, perRack, events = 4, 4, 40, 3000
	rng := rand.New(rand.NewPCG(seed, 99))
	free := map[int64]Candidate{}
	id := int64(1)
	for r := range rows {
		for k := range racks {
			for range perRack {
				free[id] = Candidate{ID: id, Path: []string{strconv.Itoa(r), strconv.Itoa(k)}}
				id++
			}
		}
	}
	total := len(free)
	var groups [][]Candidate
	rackFree := map[string]int{}
	for _, c := range free {
		rackFree[DomainName(c.Path)]++
	}
	samples, sampled := 0, 0
	cands := func() []Candidate {
		out := make([]Candidate, 0, len(free))
		for _, c := range free {
			out = append(out, c)
		}
		slices.SortFunc(out, func(a, b Candidate) int { return cmp.Compare(a.ID, b.ID) })
		return out
	}
	for range events {
		used := total - len(free)
		if len(groups) > 0 && (used*4 > total*3 || rng.IntN(2) == 0) {
			i := rng.IntN(len(groups))
			for _, c := range groups[i] {
				free[c.ID] = c
				rackFree[DomainName(c.Path)]++
			}
			groups = slices.Delete(groups, i, i+1)
		} else {
			r.arrivals++
			r.rejected += arrive(rng, random, free, rackFree, &groups, cands)
		}
		if used := total - len(free); used*100 >= total*70 && used*100 <= total*75 {
			for _, n := range rackFree {
				samples += n / 32
			}
			sampled++
		}
	}
	if sampled > 0 {
		r.meanFit32 = float64(samples) / float64(sampled)
	}
	r.free = len(free)
	// How many 32-node groups fit now, one after another.
	left := cands()
	for {
		plans, nf := Choose(rowRack, left, Request{Count: 32, Rule: Required, Level: 1}, nil)
		if nf != nil {
			return r
		}
		taken := map[int64]bool{}
		for _, c := range plans[0].Nodes[:32] {
			taken[c.ID] = true
		}
		left = slices.DeleteFunc(left, func(c Candidate) bool { return taken[c.ID] })
		r.fit32++
	}
}

type churnResult struct {
	fit32, free, arrivals, rejected int
	meanFit32                       float64
}

// arrive places one group of a random size (1 to 32) in one rack; it
// returns 1 when no rack has room.
func arrive(rng *rand.Rand, random bool, free map[int64]Candidate, rackFree map[string]int,
	groups *[][]Candidate, cands func() []Candidate) int {
	size := 1 + rng.IntN(32)
	plans, nf := Choose(rowRack, cands(), Request{Count: size, Rule: Required, Level: 1}, rng)
	if nf != nil {
		return 1
	}
	p := plans[0]
	if random {
		p = plans[rng.IntN(len(plans))]
	}
	g := slices.Clone(p.Nodes[:size])
	for _, c := range g {
		delete(free, c.ID)
		rackFree[DomainName(c.Path)]--
	}
	*groups = append(*groups, g)
	return 0
}

// TestFragmentation logs the fragmentation figure: during and after the
// same churn, how many 32-node groups still fit with best fit and with a
// random fitting rack, averaged over seeds. Best fit must do no worse than
// random placement at the same load, and turn away no more groups.
func TestFragmentation(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	var best, rnd churnResult
	var meanBest, meanRnd float64
	for s := range seeds {
		b, r := churn(uint64(s), false), churn(uint64(s), true)
		best = churnResult{best.fit32 + b.fit32, best.free + b.free, best.arrivals + b.arrivals, best.rejected + b.rejected, 0}
		rnd = churnResult{rnd.fit32 + r.fit32, rnd.free + r.free, rnd.arrivals + r.arrivals, rnd.rejected + r.rejected, 0}
		meanBest, meanRnd = meanBest+b.meanFit32, meanRnd+r.meanFit32
	}
	n := float64(seeds)
	t.Logf("fleet 4 rows x 4 racks x 40 nodes; 3000 arrivals/departures, sizes 1-32, required rack, up to 75%% in use; mean of %d seeds:", seeds)
	for _, x := range []struct {
		name string
		r    churnResult
		mean float64
	}{{"best fit   ", best, meanBest}, {"random rack", rnd, meanRnd}} {
		t.Logf("  %s: %.2f groups of 32 fit at 70-75%% use; %.1f of %.0f arrivals found no rack; at the end %.1f fit (%.0f nodes free)",
			x.name, x.mean/n, float64(x.r.rejected)/n, float64(x.r.arrivals)/n, float64(x.r.fit32)/n, float64(x.r.free)/n)
	}
	if meanBest < meanRnd {
		t.Errorf("at the same load, best fit leaves room for fewer 32-node groups (%.2f) than random placement (%.2f)", meanBest/n, meanRnd/n)
	}
	if best.rejected > rnd.rejected {
		t.Errorf("best fit turned away more groups (%d) than random placement (%d)", best.rejected, rnd.rejected)
	}
}
