package candidate

import (
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Finder answers GET /allocation_candidates from the placement schema: it
// loads the provider trees in play (load.go, cached by cache.go), runs the pure search
// over them (Search, search.go) and writes Placement's JSON answer
// (Result.Write). Create with NewFinder; safe for concurrent use.
type Finder struct {
	pool      *pgxpool.Pool
	q         *Queries
	randomize func() bool
	// traitIDNames caches trait names by id (a trait's name never changes
	// and ids are not reused).
	traitIDNames sync.Map
	// cache holds the static rows of the whole world at a version of
	// placement.world_version (cache.go).
	cache cacheState
	// maxCached is the most providers for which a limited request searches
	// the whole cached world (maxCachedProviders; tests lower it to run
	// the batched SQL search on small worlds).
	maxCached int64
	// maxCands is the most candidates one request generates (SetMax; 0:
	// no bound).
	maxCands atomic.Int64
	// collectMax is the most candidates of an answer in order kept in
	// memory (collectMax). Negative, every answer from one world is
	// collected whole, then sampled, as a randomized one: the reference
	// tests compare the streamed answers with.
	collectMax int
}

// DefaultMax is the default of SetMax (and of metalloc-placement's
// placement.max_allocation_candidates): generous for any flat fleet,
// while a request that multiplies many granular groups over wide trees
// (8 children, 6 groups: 262,144 candidates, 160 MB of JSON) stops
// there.
const DefaultMax = 100000

// SetMax sets the most allocation candidates one request generates (n <=
// 0: no bound), Placement's [placement] max_allocation_candidates
// (Placement 2023.2 and later; -1, no bound, by default there): the bound
// holds while the candidates are generated, before limit is applied or a
// random sample drawn, so a limited or randomized request picks among the
// first n. It bounds the work and the answer of one request; its memory
// is bounded apart from it (an answer in order is written as it is
// searched, only a randomized one is held whole). The Finder starts with
// DefaultMax.
func (f *Finder) SetMax(n int) {
	if n < 0 {
		n = 0
	}
	f.maxCands.Store(int64(n))
}

// maxCandidates is SetMax's bound (0: none).
func (f *Finder) maxCandidates() int { return int(f.maxCands.Load()) }

// NewFinder returns a Finder on pool. randomize reports Placement's
// randomize_allocation_candidates option at the time of each request.
func NewFinder(pool *pgxpool.Pool, randomize func() bool) *Finder {
	f := &Finder{pool: pool, q: New(pool), randomize: randomize, maxCached: maxCachedProviders, collectMax: collectMax}
	f.SetMax(DefaultMax)
	return f
}
