package allocation

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// The hub's cache of allocations (issue 29): GET /v1/allocations/{uuid}
// and the reads of Prefer: wait answered from memory, kept current by the
// notifications the hub receives anyway (migrations/00029_allocation_cache.sql).
//
// An entry is written only by a read that started after the entry was
// opened (begin, then the database read, then fill): a change whose
// notification arrives in between removes the open entry, so fill finds
// nothing to fill and a stale read is never kept. The one exception is a
// reservation notified before the read that opened the entry fills it (a
// conductor reserved the allocation while the POST that created it was
// still on its way back): the open entry keeps the reservation, and fill
// applies it to a read that found the allocation still allocating, so the
// waiters it wakes are answered from memory instead of all reading the
// database at once. Every notification of a
// cached allocation updates it (a reservation: state active, its node and
// updated_at, all in the payload) or removes it (anything else: a
// failure, a deletion, a change of name or extra); the notification of an
// allocation's creation leaves its entry as it is (allocating). While the
// hub's listener is not connected nothing is cached or served (a
// notification might be missed), and a reconnection empties the cache.
//
// A cached answer is the allocation as this process last learnt it: a
// change committed through another process reaches it with the
// notification, within the delivery time of a NOTIFY (well under a
// millisecond on a healthy database), during which a GET here still shows
// the allocation as it was.

// DefaultCacheSize is how many allocations an API process keeps in its
// cache at most (the oldest entries go first).
const DefaultCacheSize = 20000

type cacheEntry struct {
	gen  uint64
	view *View // nil while a read is filling it
	// reserved is a reservation notified while view was nil, for fill.
	reserved *reservation
}

// reservation is what the notification of an allocation's reservation
// says (migrations/00029_allocation_cache.sql): its node and updated_at.
type reservation struct {
	node uuid.UUID
	at   time.Time
}

// apply returns v reserved as r says: active on r.node since r.at.
func (r reservation) apply(v View) View {
	node, at := r.node, r.at
	v.State, v.NodeUUID, v.UpdatedAt, v.LastError = StateActive, &node, &at, nil
	v.NodeID = nil // not in the payload; the document shows the uuid
	return v
}

// viewCache is the hub's cache. Its zero value is unusable: newViewCache.
type viewCache struct {
	mu      sync.Mutex
	live    bool // the listener is connected: notifications arrive
	gen     uint64
	max     int
	entries map[uuid.UUID]*cacheEntry
	order   []uuid.UUID // insertion order, for the bound (may hold removed uuids)
	hits    uint64
	misses  uint64
}

func newViewCache(max int) *viewCache {
	if max <= 0 {
		max = DefaultCacheSize
	}
	return &viewCache{max: max, entries: map[uuid.UUID]*cacheEntry{}}
}

// get returns the cached view of u, if any.
func (c *viewCache) get(u uuid.UUID) (View, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[u]; ok && e.view != nil && c.live {
		c.hits++
		return *e.view, true
	}
	c.misses++
	return View{}, false
}

// has reports whether u is cached (not counted as a lookup).
func (c *viewCache) has(u uuid.UUID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[u]
	return ok && e.view != nil && c.live
}

// begin opens an entry for u before a read of it and returns the token
// fill needs (0: nothing may be cached now).
func (c *viewCache) begin(u uuid.UUID) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live {
		return 0
	}
	if e, ok := c.entries[u]; ok {
		if e.view == nil {
			return e.gen // another read is filling it: either may
		}
		delete(c.entries, u) // replaced by the read about to start
	}
	c.gen++
	c.entries[u] = &cacheEntry{gen: c.gen}
	c.order = append(c.order, u)
	c.trim()
	return c.gen
}

// fill stores v, read after begin returned gen, unless a notification
// removed the entry meanwhile.
func (c *viewCache) fill(gen uint64, v View) {
	if gen == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[v.Uuid]; ok && e.gen == gen && e.view == nil {
		if e.reserved != nil && v.State == StateAllocating {
			v = e.reserved.apply(v)
		}
		e.view, e.reserved = &v, nil
	}
}

// forget removes u's entry (a change this process made: it need not wait
// for the notification).
func (c *viewCache) forget(u uuid.UUID) {
	c.mu.Lock()
	delete(c.entries, u)
	c.mu.Unlock()
}

// trim drops the oldest entries beyond max (under mu).
func (c *viewCache) trim() {
	for len(c.entries) > c.max && len(c.order) > 0 {
		delete(c.entries, c.order[0])
		c.order = c.order[1:]
	}
	if len(c.order) > 2*c.max { // mostly removed uuids: compact
		keep := c.order[:0]
		for _, u := range c.order {
			if _, ok := c.entries[u]; ok {
				keep = append(keep, u)
			}
		}
		c.order = keep
	}
}

// setLive turns caching on (the listener just connected: what was cached
// before may have missed notifications, so it goes) or off (the listener
// is gone).
func (c *viewCache) setLive(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live = live
	clear(c.entries)
	c.order = nil
}

// notified applies one notification's payload (see the file comment).
func (c *viewCache) notified(payload string) {
	f := strings.Fields(payload)
	if len(f) < 2 {
		return
	}
	u, err := uuid.Parse(f[0])
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[u]
	if !ok {
		return
	}
	state := State(f[1])
	switch {
	case len(f) == 2 && state == StateAllocating && (e.view == nil || e.view.State == StateAllocating):
		// Its creation: an allocation is allocating only until its state
		// changes, which notifies again; a read being filled read it so.
		return
	case len(f) == 4 && state == StateActive && e.reserved == nil &&
		(e.view == nil || e.view.State == StateAllocating):
		node, err1 := uuid.Parse(f[2])
		us, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 == nil && err2 == nil {
			r := reservation{node: node, at: time.UnixMicro(us).UTC()}
			if e.view == nil {
				e.reserved = &r // for fill
			} else {
				v := r.apply(*e.view)
				e.view = &v
			}
			return
		}
	}
	delete(c.entries, u)
}

// stats is how many lookups the cache answered and how many it did not.
func (c *viewCache) stats() (hits, misses uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}

// The Hub's face of its cache, for the handlers; every method is a no-op
// on a nil Hub or one without a cache.

func (h *Hub) cached(u uuid.UUID) (View, bool) {
	if h == nil || h.cache == nil {
		return View{}, false
	}
	return h.cache.get(u)
}

// Has reports whether this process's cache holds allocation u, so that
// metalloc has it without asking the database (the front in front of
// Ironic: ironic.FrontOptions.Known). A deletion's notification removes
// the entry, so true means the allocation existed within a NOTIFY's
// delivery time, as a GET answered from the cache does; false says
// nothing (not cached, a nil Hub, or its listener not connected).
func (h *Hub) Has(u uuid.UUID) bool {
	return h != nil && h.cache != nil && h.cache.has(u)
}

func (h *Hub) cacheBegin(u uuid.UUID) uint64 {
	if h == nil || h.cache == nil {
		return 0
	}
	return h.cache.begin(u)
}

func (h *Hub) cacheFill(gen uint64, v View) {
	if h != nil && h.cache != nil {
		h.cache.fill(gen, v)
	}
}

func (h *Hub) cacheForget(u uuid.UUID) {
	if h != nil && h.cache != nil {
		h.cache.forget(u)
	}
}

// CacheStats is how many reads the hub's cache answered (hits) and how
// many went to the database (misses) so far.
func (h *Hub) CacheStats() (hits, misses uint64) {
	if h == nil || h.cache == nil {
		return 0, 0
	}
	return h.cache.stats()
}
