package candidate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/web"
)

// Result is an answer Find found, written as the JSON body by Write.
type Result struct {
	s    *cSearch
	ans  answer
	sums []*cProv
	v    web.Version
}

// Find finds the answer to req at microversion v: a Result to Write, or a
// 400 *web.Error in Placement's format for an unknown class or trait.
func (f *Finder) Find(ctx context.Context, req *Request, v web.Version) (*Result, error) {
	s := &cSearch{req: req, classNames: map[int32]string{}, sharingID: -1, traitNames: map[int64]string{}}
	traitNames := []string{"MISC_SHARES_VIA_AGGREGATE"}
	traitNames = append(traitNames, req.RootRequired...)
	traitNames = append(traitNames, req.RootForbidden...)
	for _, g := range req.Groups {
		for _, set := range g.Required {
			traitNames = append(traitNames, set...)
		}
		traitNames = append(traitNames, g.Forbidden...)
	}
	// The classes, the traits named, the context, the version of the
	// static rows with those rows when the cached ones are older, and the
	// usage are read in one round trip (one snapshot).
	// A request searches the whole world when it is unlimited without
	// member_of, or the world is small; else (scoped) SQL finds the
	// trees in play first.
	limited := req.Limit > 0
	scoped := limited
	for _, g := range req.Groups {
		if len(g.MemberOf) > 0 {
			scoped = true
		}
	}
	cached := f.cache.load()
	knownV, rowsV := int64(-1), int64(-1)
	if cached != nil {
		knownV = cached.v
		if cached.rows != nil {
			rowsV = cached.v
		}
	}
	// A scoped request on a world known to be large reads no world rows
	// here.
	sendWorld := !scoped || cached == nil || cached.small
	classByName := map[string]int32{}
	known := map[string]int64{}
	var cc CandContextRow
	var version int64
	var small *bool
	var usage []usageRow
	var fresh *worldRows
	qs := []cQuery{
		{resourceClassNames, nil, func(r pgx.Rows) error {
			var id int32
			var name string
			if err := r.Scan(&id, &name); err != nil {
				return err
			}
			s.classNames[id] = name
			classByName[name] = id
			return nil
		}},
		{traitsByNames, []any{traitNames}, func(r pgx.Rows) error {
			var id int64
			var name string
			if err := r.Scan(&id, &name); err != nil {
				return err
			}
			known[name] = id
			s.traitNames[id] = name
			return nil
		}},
		{candContext, nil, func(r pgx.Rows) error { return r.Scan(&cc.HasTrees, &cc.HasSharing) }},
		{candWorldVersion, []any{knownV, f.maxCached}, func(r pgx.Rows) error { return r.Scan(&version, &small) }},
	}
	if sendWorld {
		fresh = &worldRows{}
		args := []any{rowsV, !scoped, f.maxCached}
		qs = append(qs, worldQueries([4]string{candProvidersChanged, candTraitsChanged, candAggregatesChanged, candInventoriesChanged}, args, fresh)...)
		qs = append(qs, usageQuery(candUsageAll, nil, &usage))
	}
	err := f.queriesNoJIT(ctx, qs)
	if err != nil {
		return nil, err
	}
	var static *worldCache // the whole world's static rows, when read or cached
	isSmall := cached != nil && cached.small
	if small != nil {
		isSmall = *small
	}
	switch {
	case cached != nil && cached.rows != nil && version == cached.v:
		static = cached
	case sendWorld && (!scoped || isSmall):
		fresh.sortProviders()
		static = &worldCache{v: version, rows: fresh, small: isSmall}
		f.cache.offer(static)
	default:
		f.cache.offer(&worldCache{v: version, small: isSmall})
	}
	whole := static != nil && (!scoped || isSmall)
	if id, ok := known["MISC_SHARES_VIA_AGGREGATE"]; ok {
		s.sharingID = id
	}
	checkTraits := func(names []string) ([]int64, error) {
		ids := make([]int64, 0, len(names))
		for _, t := range names {
			id, ok := known[t]
			if !ok {
				return nil, web.PlacementErr(http.StatusBadRequest, "", "No such trait(s): %s.", t)
			}
			ids = append(ids, id)
		}
		return ids, nil
	}
	if s.rootReq, err = checkTraits(req.RootRequired); err != nil {
		return nil, err
	}
	if s.rootForb, err = checkTraits(req.RootForbidden); err != nil {
		return nil, err
	}
	empty := false
	for _, g := range req.Groups {
		gq := &cGroupQ{Group: g}
		for _, r := range g.Resources {
			id, ok := classByName[r.Class]
			if !ok {
				return nil, web.PlacementErr(http.StatusBadRequest, "",
					"Invalid resource class in resources parameter: No such resource class %s.", r.Class)
			}
			gq.classes = append(gq.classes, cClass{rc: id, name: r.Class, amount: r.Amount})
		}
		sort.Slice(gq.classes, func(i, j int) bool { return gq.classes[i].rc < gq.classes[j].rc })
		for _, set := range g.Required {
			ids, err := checkTraits(set)
			if err != nil {
				return nil, err
			}
			gq.requiredIDs = append(gq.requiredIDs, ids)
		}
		if gq.forbiddenIDs, err = checkTraits(g.Forbidden); err != nil {
			return nil, err
		}
		if g.InTree != nil && len(gq.classes) > 0 {
			root, err := f.q.CandTreeRoot(ctx, *g.InTree)
			if errors.Is(err, pgx.ErrNoRows) {
				empty = true
			} else if err != nil {
				return nil, err
			} else if root != nil {
				gq.inTreeRoot = *root
			}
		}
		s.groups = append(s.groups, gq)
	}
	if empty {
		return &Result{s: s, v: v}, nil
	}
	s.hasTrees = cc.HasTrees
	s.hasSharing = cc.HasSharing && s.sharingID >= 0

	randomize := f.randomize()
	s.max = f.maxCandidates()
	// The search stops at the limit, unless candidates are dropped after
	// it (before 1.29 on nested trees).
	noCap := !v.AtLeast(1, 29) && s.hasTrees
	var w *cWorld // the world searched in one piece (nil: batches)
	if whole {
		w = static.worldFor(s.sharingID)
		s.usage = make([]int64, w.nInv)
		w.usageInto(s.usage, usage)
		// With member_of, only the trees near the aggregates can anchor.
		for _, g := range s.groups {
			if len(g.MemberOf) == 0 {
				continue
			}
			s.anchorIn = memberOfAnchors(w, g.MemberOf)
			if len(s.anchorIn) == 0 {
				return &Result{s: s, v: v}, nil
			}
			break
		}
		if limited && !noCap {
			s.cap = req.Limit
			if randomize && len(w.rootOrder) > 0 {
				// As the batched walk: start at a random root and wrap.
				s.rotate = rand.IntN(len(w.rootOrder))
			}
		}
	} else if !limited {
		// Unlimited with member_of on a large world: the trees near the
		// aggregates.
		var scope []int64
		for _, g := range s.groups {
			if len(g.MemberOf) == 0 {
				continue
			}
			roots, err := f.memberOfRoots(ctx, s, g.MemberOf)
			if err != nil {
				return nil, err
			}
			if len(roots) == 0 {
				return &Result{s: s, v: v}, nil
			}
			s.anchorIn = make(map[int64]bool, len(roots))
			for _, r := range roots {
				s.anchorIn[r] = true
			}
			if scope, err = f.withSharingRoots(ctx, s, roots); err != nil {
				return nil, err
			}
			break
		}
		if w, err = f.loadWorld(ctx, scope, s.sharingID, &s.usage); err != nil {
			return nil, err
		}
	}

	// The answer: in order, from one world, it is searched here for the
	// trees it uses and, when large, searched again as it is written
	// (stream.go); else collected, then sampled.
	var ans answer
	switch {
	case w != nil && !randomize && f.collectMax >= 0:
		ans = s.inOrder(w, noCap, f.collectMax)
	case w != nil:
		ans = s.sample(s.collect(w, map[string]bool{}), noCap, randomize)
	default:
		areqs, err := f.searchBatches(ctx, s, randomize, noCap)
		if err != nil {
			return nil, err
		}
		ans = s.sample(areqs, noCap, randomize)
	}
	sums := summaries(ans.roots, ans.keepProvs)
	if err := f.traitNamesFor(ctx, s, sums, v); err != nil {
		return nil, err
	}
	return &Result{s: s, ans: ans, sums: sums, v: v}, nil
}

// sample is the answer of the collected candidates areqs: before 1.29 on
// nested trees (noCap) only those using one provider per tree, then a
// random sample of limit (randomize, shuffled) or the first limit.
func (s *cSearch) sample(areqs []*cAreq, noCap, randomize bool) answer {
	var ans answer
	if noCap {
		ans.keepProvs = map[int64]bool{}
		kept := areqs[:0]
		for _, a := range areqs {
			if onePerTree(a) {
				kept = append(kept, a)
				markProviders(ans.keepProvs, a)
			}
		}
		areqs = kept
	}
	limit := s.req.Limit
	if limit > 0 && limit < len(areqs) {
		if randomize {
			rand.Shuffle(len(areqs), func(i, j int) { areqs[i], areqs[j] = areqs[j], areqs[i] })
		}
		areqs = areqs[:limit]
	} else if randomize {
		rand.Shuffle(len(areqs), func(i, j int) { areqs[i], areqs[j] = areqs[j], areqs[i] })
	}
	ans.areqs = areqs
	marked := map[*cProv]bool{}
	for _, a := range areqs {
		ans.roots = markRoots(ans.roots, marked, a)
	}
	return ans
}

// onePerTree reports whether a uses at most one provider of each tree
// (what a candidate must do before 1.29).
func onePerTree(a *cAreq) bool {
	for i, rr := range a.rrs {
		for _, o := range a.rrs[:i] {
			if o.p != rr.p && o.p.root == rr.p.root {
				return false
			}
		}
	}
	return true
}

// markProviders adds the providers a uses to set.
func markProviders(set map[int64]bool, a *cAreq) {
	for _, rr := range a.rrs {
		set[rr.p.id] = true
	}
}

// markRoots appends to roots those of the trees a uses not yet marked.
func markRoots(roots []*cProv, marked map[*cProv]bool, a *cAreq) []*cProv {
	for _, rr := range a.rrs {
		if r := rr.p.rootP; r != nil && !marked[r] {
			marked[r] = true
			roots = append(roots, r)
		}
	}
	return roots
}

// summaries lists the providers of the provider summaries: every provider
// of the trees of roots (keepProvs, when set, those only), by root id (a
// tree loaded by two batches is summarized once).
func summaries(roots []*cProv, keepProvs map[int64]bool) []*cProv {
	byID := func(a, b *cProv) int { return cmp.Compare(a.id, b.id) }
	if !slices.IsSortedFunc(roots, byID) {
		slices.SortStableFunc(roots, byID)
	}
	var sums []*cProv
	for i, r := range roots {
		if i > 0 && roots[i-1].id == r.id {
			continue
		}
		for _, p := range r.tree {
			if keepProvs == nil || keepProvs[p.id] {
				sums = append(sums, p)
			}
		}
	}
	return sums
}

// traitNamesFor fills s.traitNames for the traits of the summaries.
func (f *Finder) traitNamesFor(ctx context.Context, s *cSearch, sums []*cProv, v web.Version) error {
	if !v.AtLeast(1, 17) {
		return nil
	}
	cache := &f.traitIDNames
	var missing []int64
	for _, p := range sums {
		for _, t := range p.traits {
			if _, ok := s.traitNames[t]; ok {
				continue
			}
			if n, ok := cache.Load(t); ok {
				s.traitNames[t] = n.(string)
				continue
			}
			missing = append(missing, t)
			s.traitNames[t] = ""
		}
	}
	if len(missing) == 0 {
		return nil
	}
	rows, err := f.q.CandTraitNames(ctx, missing)
	if err != nil {
		return err
	}
	for _, r := range rows {
		s.traitNames[r.ID] = r.Name
		cache.Store(r.ID, r.Name)
	}
	return nil
}

// searchBatches finds the first candidates up to the limit, loading root
// providers in batches in id order. Randomized, the walk starts at a
// uniformly random root id and wraps around (the same cost as the ordered
// walk, instead of listing every root to shuffle them); the caller shuffles
// what it finds and keeps a random limit of them.
func (f *Finder) searchBatches(ctx context.Context, s *cSearch, randomize, noCap bool) ([]*cAreq, error) {
	limit := s.req.Limit
	var after, start int64 // start: the random first root id (0: none)
	wrapped := false
	if randomize {
		var lo, hi *int64
		if err := f.pool.QueryRow(ctx, `SELECT min(id), max(id) FROM placement.resource_providers`).Scan(&lo, &hi); err != nil {
			return nil, err
		}
		if lo == nil || hi == nil {
			return nil, nil
		}
		start = *lo + rand.Int64N(*hi-*lo+1)
		after = start - 1
	}
	seen := map[string]bool{}
	var out []*cAreq
	batch := max(2*limit, 64)
	for len(out) < limit && !s.atMax() {
		roots, err := f.candidateRoots(ctx, s, after, batch)
		if err != nil {
			return nil, err
		}
		full := len(roots) == batch
		if wrapped {
			// Past the end and back to the start: stop before the first
			// root of the walk.
			if i := slices.IndexFunc(roots, func(r int64) bool { return r >= start }); i >= 0 {
				roots, full = roots[:i], false
			}
		}
		if len(roots) > 0 {
			after = roots[len(roots)-1]
			s.anchorIn = make(map[int64]bool, len(roots))
			for _, r := range roots {
				s.anchorIn[r] = true
			}
			scope, err := f.withSharingRoots(ctx, s, roots)
			if err != nil {
				return nil, err
			}
			w, err := f.loadWorld(ctx, scope, s.sharingID, &s.usage)
			if err != nil {
				return nil, err
			}
			if !noCap {
				s.cap = limit - len(out)
			}
			out = append(out, s.collect(w, seen)...)
		}
		if !full {
			if start == 0 || wrapped {
				break
			}
			wrapped, after = true, 0
		}
		batch = min(batch*4, 20000)
	}
	return out, nil
}

// withSharingRoots adds to roots those of the trees of the sharing
// providers in an aggregate with their trees.
func (f *Finder) withSharingRoots(ctx context.Context, s *cSearch, roots []int64) ([]int64, error) {
	scope := append(make([]int64, 0, len(roots)), roots...)
	if !s.hasSharing {
		return scope, nil
	}
	shared, err := f.q.CandSharingRootsFor(ctx, CandSharingRootsForParams{SharingTrait: s.sharingID, Roots: roots})
	if err != nil {
		return nil, err
	}
	for _, r := range shared {
		if r != nil {
			scope = append(scope, *r)
		}
	}
	return scope, nil
}

// memberOfAnchors returns the roots that may anchor a candidate of a
// group with member_of sets: those of the providers in the aggregates, and
// those of the providers sharing an aggregate with a sharing provider in
// them.
func memberOfAnchors(w *cWorld, memberOf [][]uuid.UUID) map[int64]bool {
	out := map[int64]bool{}
	for _, p := range w.order {
		if !p.inAllAggs(memberOf) {
			continue
		}
		out[p.root] = true
		if p.sharing {
			for _, r := range w.sharingAnchors[p.id] {
				out[r] = true
			}
		}
	}
	return out
}

// memberOfRoots returns the roots that may anchor a candidate of a group
// with member_of sets: those of the providers in the aggregates, and those
// of the providers sharing an aggregate with a sharing provider in them.
func (f *Finder) memberOfRoots(ctx context.Context, s *cSearch, memberOf [][]uuid.UUID) ([]int64, error) {
	var sb strings.Builder
	var args []any
	sb.WriteString(`WITH m AS (SELECT p.id, p.root_provider_id FROM placement.resource_providers p WHERE true`)
	for _, set := range memberOf {
		args = append(args, set)
		fmt.Fprintf(&sb, ` AND p.id IN (SELECT resource_provider_id FROM placement.resource_provider_aggregates
			WHERE aggregate_uuid = ANY($%d::uuid[]))`, len(args))
	}
	sb.WriteString(`) SELECT root_provider_id FROM m`)
	if s.hasSharing {
		args = append(args, s.sharingID)
		fmt.Fprintf(&sb, ` UNION SELECT o.root_provider_id FROM m
			JOIN placement.resource_provider_traits st ON st.resource_provider_id = m.id AND st.trait_id = $%d
			JOIN placement.resource_provider_aggregates sa ON sa.resource_provider_id = m.id
			JOIN placement.resource_provider_aggregates oa ON oa.aggregate_uuid = sa.aggregate_uuid
			JOIN placement.resource_providers o ON o.id = oa.resource_provider_id`, len(args))
	}
	var out []int64
	err := f.queryNoJIT(ctx, sb.String(), args, func(r pgx.Rows) error {
		var id *int64
		err := r.Scan(&id)
		if id != nil {
			out = append(out, *id)
		}
		return err
	})
	return out, err
}

// candidateRoots returns root providers after the id after (at most lim,
// 0 for all), in id order, whose tree could anchor a candidate: for every
// requested class (at its smallest amount among the groups) some provider
// of the tree, or a sharing provider in an aggregate with one, has an
// inventory that could hold it (usage is left to the exact check in Go).
func (f *Finder) candidateRoots(ctx context.Context, s *cSearch, after int64, lim int) ([]int64, error) {
	sql, args := candidateRootsSQL(s, after, lim)
	var out []int64
	err := f.queriesWith(ctx, rootWalkSettings, []cQuery{{sql, args, func(r pgx.Rows) error {
		var id int64
		err := r.Scan(&id)
		out = append(out, id)
		return err
	}}})
	return out, err
}
