package candidate

import (
	"sync"

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
}

// NewFinder returns a Finder on pool. randomize reports Placement's
// randomize_allocation_candidates option at the time of each request.
func NewFinder(pool *pgxpool.Pool, randomize func() bool) *Finder {
	return &Finder{pool: pool, q: New(pool), randomize: randomize, maxCached: maxCachedProviders}
}
