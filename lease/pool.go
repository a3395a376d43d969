package lease

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/metalloc/metalloc/topology"
)

// Admission's pick reads the reservable nodes from a copy each Store
// keeps in memory (poolCache), not from the nodes table: what a lease
// may take changes little (a node's class, traits, topology path,
// maintenance flag, whether it is reservable), what it may not take
// over its window changes with every lease (the busy nodes, read from
// lease_nodes at each admission: BusyNodes). The copy only speeds the
// pick up; it never decides what is booked:
//
//   - a pick made on it is checked against the nodes' rows in the
//     admission's transaction (PickedNodes: still reservable, of the
//     class, with the traits, not in maintenance, in the pick's domain)
//     and the exclusion constraint of lease_nodes refuses a node another
//     lease holds, as for any pick;
//   - a pick that no longer holds, a lease that does not fit on the
//     copy, a copy of another topology: the pick is made again on the
//     database's own read (FreeNodes), as without the copy, and a copy
//     found wrong is read again at the next admission.
//
// So a copy that missed a change costs a second read, not a wrong
// booking nor a wrong refusal. The copy is read again after poolMaxAge,
// or after poolMaxAgeLoads times what reading it took when that is
// longer (in the background: admissions meanwhile use the copy they
// have), and at the next admission after it was found wrong, unless it
// was read less than poolMaxAgeLoads times that ago (so that a fleet
// that takes a second to read is not read more than 5 % of the time). Issue 43: at 10,000 nodes and 40,000
// booked rows, FreeNodes reads every node of the class with its traits
// and the busy intervals, 40 ms of database time per admission on a
// 2-core machine; the busy nodes alone take a few.

// poolMaxAge is how long admission picks from a pool copy before it
// reads the pool again.
const poolMaxAge = 10 * time.Second

// poolMaxAgeLoads: a copy is kept at least this many times what reading
// it took.
const poolMaxAgeLoads = 20

// poolCache is a Store's copy of the reservable nodes (PoolNodes), by
// class, with the topology sources their paths were computed over.
type poolCache struct {
	pool    *pgxpool.Pool // for reloadInBackground (nil: none)
	mu      sync.Mutex
	loading bool       // a reloadInBackground runs
	gen     uint64     // counts invalidate's calls
	all     []poolNode // id order
	byClass map[string][]poolNode
	at      map[int64]poolAt // a node's place in all and in byClass
	sources []string
	loaded  time.Time
	took    time.Duration
	invalid bool
}

// poolNode is a node of a pool copy: its row and its domain key at each
// level of the path (domainKey; "" where it is in none), computed once
// per copy rather than per admission.
type poolNode struct {
	PoolNodesRow
	keys []string
}

// poolAt is a node's place in a pool copy: its index in all and in its
// class's list of byClass.
type poolAt struct{ all, inClass int32 }

// keep is how long c's copy is kept.
func (c *poolCache) keep() time.Duration {
	return max(poolMaxAge, poolMaxAgeLoads*c.took)
}

// invalidate makes the next admission read the pool again (unless the
// copy is younger than poolMaxAgeLoads times its read; until then
// admission reads the database's own way).
func (c *poolCache) invalidate() {
	c.mu.Lock()
	c.invalid = true
	c.gen++
	c.mu.Unlock()
}

// nodes returns the copy, read again (on db, with the topology's
// levels) when it is older than keep or was found wrong; ok is false
// when a copy found wrong is too young to be read again (poolMaxAgeLoads
// times what reading it took).
func (c *poolCache) nodes(ctx context.Context, db topology.DBTX) (byClass map[string][]poolNode, sources []string, ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fresh(ctx, db); err != nil || c.invalid {
		return nil, nil, false, err
	}
	return c.byClass, c.sources, true, nil
}

// copyOf is the copy for a read of class rc (nil: every class): its
// nodes (of rc, or all, in id order), where each node is in them (a
// node of another class: at[id] is its place among its own class's,
// another id), and its sources; ok as nodes'.
func (c *poolCache) copyOf(ctx context.Context, db topology.DBTX, rc *string) (rows []poolNode, at map[int64]poolAt, sources []string, ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fresh(ctx, db); err != nil || c.invalid {
		return nil, nil, nil, false, err
	}
	rows = c.all
	if rc != nil {
		rows = c.byClass[*rc]
	}
	return rows, c.at, c.sources, true, nil
}

// fresh reads the copy again when nodes should (c.mu held): at once
// when there is none or it was found wrong (c.invalid stays set when it
// is too young to be read again), in the background when it is only
// older than keep (the copy kept meanwhile, so that no admission waits
// for the read).
func (c *poolCache) fresh(ctx context.Context, db topology.DBTX) error {
	age := time.Since(c.loaded)
	switch {
	case c.byClass != nil && c.invalid && age < poolMaxAgeLoads*c.took:
		return nil
	case c.byClass != nil && !c.invalid:
		if age >= c.keep() && !c.loading && c.pool != nil {
			c.loading = true
			go c.reloadInBackground(c.gen)
		}
		return nil
	}
	began := time.Now()
	p, err := readPool(ctx, db)
	if err != nil {
		return err
	}
	c.set(p, began)
	c.invalid = false
	return nil
}

// reloadInBackground reads the copy again on a connection of its own,
// and keeps what it read unless the copy was found wrong or read again
// meanwhile (gen: c.gen when it began).
func (c *poolCache) reloadInBackground(gen uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	var p poolRead
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := New(tx).ReadPlans(ctx); err != nil {
			return err
		}
		var err error
		p, err = readPool(ctx, tx)
		return err
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loading = false
	if err == nil && c.gen == gen && c.loaded.Before(began) {
		c.set(p, began)
	}
}

// set makes p, read from began, the copy (mu held).
func (c *poolCache) set(p poolRead, began time.Time) {
	c.all, c.byClass, c.at, c.sources = p.all, p.byClass, p.at, p.sources
	c.loaded, c.took = time.Now(), time.Since(began)
}

// poolRead is what readPool read: a copy's nodes (all in id order, by
// class in id order), their places, the sources of their paths.
type poolRead struct {
	all     []poolNode
	byClass map[string][]poolNode
	at      map[int64]poolAt
	sources []string
}

// readPool reads the pool copy on db: every reservable node (PoolNodes,
// id order, and by class) with its path over the topology's levels
// (sources).
func readPool(ctx context.Context, db topology.DBTX) (p poolRead, err error) {
	levels, err := topology.Load(ctx, db)
	if err != nil {
		return p, err
	}
	p.sources = levelSources(levels, len(levels)-1)
	rows, err := New(db).PoolNodes(ctx, p.sources)
	if err != nil {
		return p, fmt.Errorf("reading the reservable nodes: %w", err)
	}
	p.all = make([]poolNode, len(rows))
	p.byClass = map[string][]poolNode{}
	p.at = make(map[int64]poolAt, len(rows))
	for i, r := range rows {
		n := poolNode{PoolNodesRow: r, keys: make([]string, len(r.Path))}
		for l := range r.Path {
			n.keys[l], _ = domainKey(r.Path, l)
		}
		p.all[i] = n
		p.at[r.ID] = poolAt{all: int32(i), inClass: int32(len(p.byClass[r.ResourceClass]))}
		p.byClass[r.ResourceClass] = append(p.byClass[r.ResourceClass], n)
	}
	return p, nil
}

// servesSources reports whether paths over the copy's sources serve a
// read over sources (theirs down to a level: a prefix).
func servesSources(copied, sources []string) bool {
	return len(sources) <= len(copied) && slices.Equal(sources, copied[:len(sources)])
}

// cachedMatching is MatchingNodes (matching's read, for availability)
// on the pool copy: the reservable nodes of class rc (nil: every class),
// in id order, whether each fits (every trait of traits, none of
// forbidden), is in maintenance, and its busy intervals over [from,
// until) (BusyIntervals, sorted by start). No uuid nor name. A copy is
// at most poolMaxAge old (or a read later when found wrong): an answer
// of counts may count a node put in maintenance or made reservable
// since, which admission then checks. ok is false as for cachedFree.
func (s *Store) cachedMatching(ctx context.Context, db topology.DBTX, rc *string, traits, forbidden, sources []string,
	from, until time.Time) (out []node, ok bool, err error) {
	rows, at, copied, ok, err := s.cache.copyOf(ctx, db, rc)
	if err != nil || !ok || !servesSources(copied, sources) {
		return nil, false, err
	}
	// [from, until) as whole seconds that overlap the same rows (whose
	// bounds are whole seconds): from rounded down, until up.
	ceil := until.Unix()
	if until.After(time.Unix(ceil, 0)) {
		ceil++
	}
	b, err := New(db).BusyIntervals(ctx, BusyIntervalsParams{FromUnix: from.Unix(), UntilUnix: ceil})
	if err != nil {
		return nil, false, fmt.Errorf("reading the nodes booked over the period: %w", err)
	}
	// Each row's place in rows (-1: a node not in them), then the busy
	// intervals in one array, each node's a slice of it (tens of
	// thousands of rows: no map of slices to grow).
	n := min(len(b.NodeIds), len(b.BusyFrom), len(b.BusyTo))
	place := make([]int32, n)
	first := make([]int32, len(rows)+1)
	for i, id := range b.NodeIds[:n] {
		place[i] = -1
		if p, found := at[id]; found {
			j := p.all
			if rc != nil {
				j = p.inClass
			}
			if int(j) < len(rows) && rows[j].ID == id {
				place[i] = j
				first[j+1]++
			}
		}
	}
	for j := range rows {
		first[j+1] += first[j]
	}
	spans := make([]span, first[len(rows)])
	fill := slices.Clone(first[:len(rows)])
	for i, j := range place {
		if j >= 0 {
			spans[fill[j]] = span{b.BusyFrom[i], b.BusyTo[i]}
			fill[j]++
		}
	}
	out = make([]node, len(rows))
	for i, r := range rows {
		fits := hasTraits(r.Traits, traits, forbidden)
		busy := spans[first[i]:first[i+1]:first[i+1]]
		if len(busy) == 0 {
			busy = nil
		}
		slices.SortFunc(busy, func(a, b span) int { return cmp.Compare(a.From, b.From) })
		out[i] = node{ID: r.ID, Class: r.ResourceClass, Path: r.Path, Keys: r.keys, Maint: r.Maintenance, Fits: fits,
			Eligible: fits && !r.Maintenance, Busy: busy}
	}
	return out, true, nil
}

// cachedFree is free on the pool copy: per reservation of rs, its free
// nodes over [from, until) (of its class, not in maintenance, with its
// traits and none of its forbidden ones, among its Nodes when it names
// them, not held by a lease over part of the window: BusyNodes), every
// one of them, with its topology path. ok is false when the copy cannot
// serve rs: a reservation's sources that are not those of the copy's
// topology, a copy found wrong and too young to be read again.
func (s *Store) cachedFree(ctx context.Context, db topology.DBTX, rs []Reservation, from, until time.Time) (out [][]node, ok bool, err error) {
	byClass, sources, ok, err := s.cache.nodes(ctx, db)
	if err != nil || !ok {
		return nil, false, err
	}
	for _, r := range rs {
		if !servesSources(sources, r.Sources) {
			return nil, false, nil
		}
	}
	ids, err := New(db).BusyNodes(ctx, BusyNodesParams{FromTime: from, UntilTime: until})
	if err != nil {
		return nil, false, fmt.Errorf("reading the nodes booked over the window: %w", err)
	}
	busy := make(map[int64]bool, len(ids))
	for _, id := range ids {
		busy[id] = true
	}
	out = make([][]node, len(rs))
	for i, r := range rs {
		var among map[int64]bool
		if r.Nodes != nil {
			among = make(map[int64]bool, len(r.Nodes))
			for _, id := range r.Nodes {
				among[id] = true
			}
		}
		pool := byClass[r.ResourceClass]
		out[i] = make([]node, 0, len(pool))
		for _, n := range pool {
			if n.Maintenance || busy[n.ID] || among != nil && !among[n.ID] || !hasTraits(n.Traits, r.Traits, r.Forbidden) {
				continue
			}
			out[i] = append(out[i], node{ID: n.ID, Class: n.ResourceClass, Path: n.Path, Keys: n.keys, Eligible: true, Fits: true})
		}
	}
	return out, true, nil
}

// hasTraits reports whether the sorted traits have every one of want
// and none of forbidden.
func hasTraits(traits, want, forbidden []string) bool {
	for _, t := range want {
		if _, found := slices.BinarySearch(traits, t); !found {
			return false
		}
	}
	for _, t := range forbidden {
		if _, found := slices.BinarySearch(traits, t); found {
			return false
		}
	}
	return true
}

// stillHold reports whether the nodes of each pick may still be taken
// by its reservation (PickedNodes: reservable, of its class, with its
// traits, not in maintenance) and, for a pick in one domain, are all in
// that domain.
func stillHold(ctx context.Context, q *Queries, rs []Reservation, picks []pick) (bool, error) {
	for i, r := range rs {
		rows, err := q.PickedNodes(ctx, PickedNodesParams{Ids: picks[i].IDs, ResourceClass: r.ResourceClass,
			Traits: nonNil(r.Traits), Forbidden: nonNil(r.Forbidden), Sources: nonNil(r.Sources)})
		if err != nil {
			return false, fmt.Errorf("checking the nodes picked: %w", err)
		}
		if len(rows) != len(picks[i].IDs) {
			return false, nil
		}
		if d := picks[i].Domain; d != nil {
			for _, row := range rows {
				if len(row.Path) < len(d) || !slices.Equal(row.Path[:len(d)], d) {
					return false, nil
				}
			}
		}
	}
	return true, nil
}

// pickAll chooses the nodes of every reservation of rs for [start, end)
// (chooseAll): on the pool copy (cachedFree), the pick checked against
// the nodes' rows (stillHold); else, or when the lease does not fit on
// the copy or its pick no longer holds, on the database's read (free).
// failed is chooseAll's.
func (s *Store) pickAll(ctx context.Context, db topology.DBTX, rs []Reservation, start, end time.Time, rnd *rand.Rand) (picks []pick, failed int, err error) {
	from, to := unix(start), unix(end)
	q := New(db)
	nodes, ok, err := s.cachedFree(ctx, db, rs, start, end)
	if err != nil {
		return nil, 0, err
	}
	if ok {
		if picks, failed = chooseAll(nodes, rs, from, to, rnd); failed < 0 {
			held, err := stillHold(ctx, q, rs, picks)
			if err != nil {
				return nil, 0, err
			}
			if held {
				return picks, -1, nil
			}
			s.cache.invalidate()
		}
	}
	if nodes, err = free(ctx, q, rs, start, end); err != nil {
		return nil, 0, err
	}
	picks, failed = chooseAll(nodes, rs, from, to, rnd)
	return picks, failed, nil
}

// bookingLockClass is the first key of the advisory locks that
// LockNodesForBooking takes ("mlnb"; the conductors' liveness locks are
// another class).
const bookingLockClass int32 = 0x6d6c6e62

// lockForBooking locks the nodes ids before they are booked
// (LockNodesForBooking).
func lockForBooking(ctx context.Context, q *Queries, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := q.LockNodesForBooking(ctx, LockNodesForBookingParams{Class: bookingLockClass, NodeIds: ids}); err != nil {
		return fmt.Errorf("locking the nodes to book: %w", err)
	}
	return nil
}
