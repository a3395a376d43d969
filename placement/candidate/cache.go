package candidate

import (
	"sync"
	"sync/atomic"
)

// maxCachedProviders is the most providers for which a limited request
// searches the whole cached world. The static rows are read once per
// version of the world (at 10,000 bare-metal providers about what one
// batched SQL search costs), and then a request reads only the usage
// (one row per provider and class allocated) where the batched search
// reads its batches of roots and their trees: at 10,000 providers with
// half of them allocated, 30 times fewer buffers than the batches
// (which the local placement backend asks for 240 candidates at a time).
// Above it, a change to the static rows (a provider, inventory, trait or
// aggregate: world_version) would cost every process a read of too many
// rows, and limited requests search batches. Unlimited requests always
// read the whole world, cached whatever its size.
const maxCachedProviders = 20000

// worldCache is the static rows (providers, traits, aggregates,
// inventories: everything the search reads but usage) at one version of
// placement.world_version, which a deferred trigger bumps in every
// transaction that changes them (migration 9). A request reads the
// version and usage in its snapshot and uses the cached rows when the
// version is theirs, so the answer is the same as reading every row.
type worldCache struct {
	v     int64
	rows  *worldRows // nil when not read (more than maxCachedProviders providers and no unlimited request yet)
	small bool       // at most maxCachedProviders providers at version v

	once      sync.Once
	world     *cWorld // built from rows on first use, then read-only
	sharingID int64   // of world
}

// worldFor is the world of the cached rows (built once, then shared by
// the requests of this version), sharingID being the id of trait
// MISC_SHARES_VIA_AGGREGATE.
func (c *worldCache) worldFor(sharingID int64) *cWorld {
	c.once.Do(func() {
		c.world, c.sharingID = buildWorld(c.rows, sharingID, 0), sharingID
	})
	if c.sharingID != sharingID {
		return buildWorld(c.rows, sharingID, 0)
	}
	return c.world
}

// cacheState is the Finder's cached world (nil before the first request).
type cacheState struct {
	mu  sync.Mutex
	cur atomic.Pointer[worldCache]
}

func (c *cacheState) load() *worldCache { return c.cur.Load() }

// offer keeps c when it is newer than the cached world, or the same
// version with rows where the cached one has none.
func (c *cacheState) offer(n *worldCache) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.cur.Load()
	if old == nil || n.v > old.v || (n.v == old.v && old.rows == nil && n.rows != nil) {
		c.cur.Store(n)
	}
}
