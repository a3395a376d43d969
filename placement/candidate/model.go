package candidate

import (
	"github.com/google/uuid"
)

// The candidate search. The provider trees in play (the cached whole
// world, or batches of root providers that SQL finds able to hold the
// requested amounts, plus the trees of sharing providers; see doc.go) are
// loaded with a few queries (providers, traits, aggregates, inventories,
// usage), and the request groups are matched and combined in Go with
// Placement's rules (objects/allocation_candidate.py, research_context.py).

// cInv is one inventory of a provider. Its usage is the request's
// (cSearch.usage[ix]): a world is read-only once built, and shared by the
// requests of one version of the static rows.
type cInv struct {
	rc                                int32
	total, reserved, minUnit, maxUnit int32
	step                              int32
	ix                                int32 // index of the usage in cSearch.usage
	ratio                             float64
}

// fits is Placement's capacity check for one requested amount, used of
// the inventory being in use.
func (i *cInv) fits(used, amount int64) bool {
	return int64(i.minUnit) <= amount && int64(i.maxUnit) >= amount && amount%int64(i.step) == 0 &&
		float64(used+amount) <= float64(i.total-i.reserved)*i.ratio
}

// capacity is (total - reserved) * allocation_ratio, truncated as Placement.
func (i *cInv) capacity() int64 { return int64(float64(i.total-i.reserved) * i.ratio) }

// cProv is a provider of the loaded trees.
type cProv struct {
	id, parent, root int64 // parent 0 for a root
	uuid             uuid.UUID
	traits           []int64 // trait ids
	aggs             []uuid.UUID
	inv              []cInv
	sharing          bool
	tree             []*cProv // for a root: its tree, by id
	ix               int32    // position in the world's order
	rootP, parentP   *cProv   // the root and parent (nil when not loaded)
	ut               [38]byte // quoted uuid text
}

// quotedUUID is the provider's uuid as a JSON string.
func (p *cProv) quotedUUID() []byte { return p.ut[:] }

func (p *cProv) invFor(rc int32) *cInv {
	for i := range p.inv {
		if p.inv[i].rc == rc {
			return &p.inv[i]
		}
	}
	return nil
}

func (p *cProv) hasTrait(t int64) bool {
	for _, x := range p.traits {
		if x == t {
			return true
		}
	}
	return false
}

func (p *cProv) inAnyAgg(set []uuid.UUID) bool {
	for _, a := range p.aggs {
		for _, b := range set {
			if a == b {
				return true
			}
		}
	}
	return false
}

// inAllAggs is membership in at least one aggregate of every set.
func (p *cProv) inAllAggs(sets [][]uuid.UUID) bool {
	for _, set := range sets {
		if !p.inAnyAgg(set) {
			return false
		}
	}
	return true
}

// cWorld is the loaded provider trees.
type cWorld struct {
	provs          map[int64]*cProv // when ids are sparse
	dense          []*cProv         // by id - base, when ids are dense
	base           int64
	order          []*cProv          // by id
	rootOrder      []*cProv          // the roots, by id
	sharingAnchors map[int64][]int64 // sharing provider -> roots of providers sharing an aggregate with it
	invBase, nInv  int32             // the inventories' usage indexes are invBase to invBase+nInv-1
}

// usageInto adds the usage rows (one per allocation: CandUsageAll,
// CandUsageIn) of w's inventories into used (indexed by cInv.ix, zero
// before; rows of inventories not in w are skipped).
func (w *cWorld) usageInto(used []int64, usage []usageRow) {
	for _, u := range usage {
		if p := w.get(u.pid); p != nil {
			if inv := p.invFor(u.rc); inv != nil {
				used[inv.ix] += u.used
			}
		}
	}
}

// get is the provider with id (nil when not loaded).
func (w *cWorld) get(id int64) *cProv {
	if w.dense != nil {
		if i := id - w.base; i >= 0 && i < int64(len(w.dense)) {
			return w.dense[i]
		}
		return nil
	}
	return w.provs[id]
}

// cClass is a requested amount of a class.
type cClass struct {
	rc     int32
	name   string
	amount int64
}

// cGroupQ is a request group with its classes resolved.
type cGroupQ struct {
	*Group
	classes      []cClass // sorted by class id
	inTreeRoot   int64    // 0 for none
	requiredIDs  [][]int64
	forbiddenIDs []int64
}

// cRR is an amount of a class from a provider.
type cRR struct {
	p      *cProv
	rc     int32
	amount int64
}

// cAreq is an allocation request: for one group (provs are the providers
// satisfying it) or merged (mappings by group index).
type cAreq struct {
	anchor   int64
	rrs      []cRR
	provs    []*cProv
	group    int
	mappings [][]*cProv // merged: per group index
	one      [1][]*cProv
}

// needsKey tells whether a may equal a request of another anchor: only
// when all its providers are sharing providers (any other provider only
// appears in requests anchored at its own root).
func (a *cAreq) needsKey() bool {
	for _, rr := range a.rrs {
		if !rr.p.sharing {
			return false
		}
	}
	for _, ps := range a.mappings {
		for _, p := range ps {
			if !p.sharing {
				return false
			}
		}
	}
	return true
}

// cArena hands out request objects and slices in chunks, to keep the
// allocation count (and GC work) of large answers low.
type cArena struct {
	areqs []cAreq
	rrs   []cRR
	provs []*cProv
}

func (ar *cArena) areq() *cAreq {
	if len(ar.areqs) == 0 {
		ar.areqs = make([]cAreq, 1024)
	}
	a := &ar.areqs[0]
	ar.areqs = ar.areqs[1:]
	return a
}

func (ar *cArena) rrSlice(n int) []cRR {
	if len(ar.rrs) < n {
		ar.rrs = make([]cRR, max(4096, n))
	}
	out := ar.rrs[:n:n]
	ar.rrs = ar.rrs[n:]
	return out
}

func (ar *cArena) provSlice(n int) []*cProv {
	if len(ar.provs) < n {
		ar.provs = make([]*cProv, max(4096, n))
	}
	out := ar.provs[:0:n]
	ar.provs = ar.provs[n:]
	return out
}
