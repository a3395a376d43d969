package backend

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/topology"
)

// candidateTTL is how long one read of the free candidates serves the
// groups with the same filter that a conductor's workers place meanwhile.
const candidateTTL = 500 * time.Millisecond

// candidateCache shares topology.FreeCandidates between a conductor's
// workers: a wave of groups of the same class would otherwise read every
// free node once per group, the one costly step of a placement (tens of
// ms at 10,000 nodes). It is only a hint: the reservation locks only nodes
// that are still free and fit (LockPlanNodes), so a node taken by another
// conductor since makes that plan fall short and the next be tried; a
// round whose plans all fell short forgets the entry, and a NoFit on a
// cached read is decided again on a fresh one (nodes may have been freed).
// Nodes this process reserved are removed from the entry at once.
type candidateCache struct {
	mu      sync.Mutex
	entries map[string]*groupCacheEntry
}

type groupCacheEntry struct {
	at    time.Time
	cands []topology.Candidate
}

// key identifies the filter of g's candidates.
func cacheKey(g ClaimedGroup) string {
	var b strings.Builder
	b.WriteString(g.ResourceClass)
	b.WriteByte(0)
	b.WriteString(strings.Join(g.Traits, ","))
	b.WriteByte(0)
	for _, u := range g.CandidateNodes {
		b.WriteString(u.String())
	}
	b.WriteByte(0)
	if g.Owner != nil {
		b.WriteString(*g.Owner)
	}
	return b.String()
}

// get returns g's free candidates: a read younger than candidateTTL
// (cached true) unless fresh, else a new read, kept for the next groups.
func (c *candidateCache) get(ctx context.Context, pool *pgxpool.Pool, g ClaimedGroup, fresh bool) ([]topology.Candidate, bool, error) {
	k := cacheKey(g)
	if !fresh {
		// The entry's fields are read under the lock: taken replaces
		// cands while other workers read.
		c.mu.Lock()
		var cands []topology.Candidate
		e := c.entries[k]
		hit := e != nil && time.Since(e.at) < candidateTTL
		if hit {
			cands = e.cands
		}
		c.mu.Unlock()
		if hit {
			return cands, true, nil
		}
	}
	at := time.Now()
	cands, err := topology.FreeCandidates(ctx, pool, topology.Filter{ResourceClass: g.ResourceClass,
		Traits: g.Traits, CandidateNodes: g.CandidateNodes, Owner: g.Owner})
	if err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]*groupCacheEntry{}
	}
	c.entries[k] = &groupCacheEntry{at: at, cands: cands}
	c.mu.Unlock()
	return cands, false, nil
}

// taken removes from g's entry the nodes a reservation of this process
// just took (into a copy: readers keep their slice).
func (c *candidateCache) taken(g ClaimedGroup, ids []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[cacheKey(g)]
	if e == nil || len(ids) == 0 {
		return
	}
	e.cands = slices.DeleteFunc(slices.Clone(e.cands), func(n topology.Candidate) bool { return slices.Contains(ids, n.ID) })
}

// forget drops g's entry.
func (c *candidateCache) forget(g ClaimedGroup) {
	c.mu.Lock()
	delete(c.entries, cacheKey(g))
	c.mu.Unlock()
}
