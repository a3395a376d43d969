package placement

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/web"
)

// The candidate search. The provider trees in play (all of them, or, with
// a limit, batches of root providers that SQL finds able to hold the
// requested amounts, plus the trees of sharing providers) are loaded with
// two queries (providers with traits and aggregates; inventories with
// usage), and the request groups are matched and combined in Go with
// Placement's rules (objects/allocation_candidate.py, research_context.py).

// cInv is one inventory of a provider with its current usage.
type cInv struct {
	rc                                int32
	total, reserved, minUnit, maxUnit int32
	step                              int32
	ratio                             float64
	used                              int64
}

// fits is Placement's capacity check for one requested amount.
func (i *cInv) fits(amount int64) bool {
	return int64(i.minUnit) <= amount && int64(i.maxUnit) >= amount && amount%int64(i.step) == 0 &&
		float64(i.used+amount) <= float64(i.total-i.reserved)*i.ratio
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
	mark             bool     // a root whose tree is summarized
	ut               [38]byte // quoted uuid text, set on first use
}

// quotedUUID is the provider's uuid as a JSON string.
func (p *cProv) quotedUUID() []byte {
	if p.ut[0] == 0 {
		appendQuotedUUID(p.ut[:0], &p.uuid)
	}
	return p.ut[:]
}

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

// tree is the loaded tree of root.
func (w *cWorld) tree(root int64) []*cProv {
	if r := w.get(root); r != nil {
		return r.tree
	}
	return nil
}

// cClass is a requested amount of a class.
type cClass struct {
	rc     int32
	name   string
	amount int64
}

// cGroupQ is a request group with its classes resolved.
type cGroupQ struct {
	*candGroup
	classes    []cClass // sorted by class id
	inTreeRoot int64    // 0 for none
	required   [][]int64
	forbidden  []int64
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

// cSearch is the request-wide state.
type cSearch struct {
	req        *candRequest
	groups     []*cGroupQ
	classNames map[int32]string
	hasTrees   bool
	hasSharing bool
	anchorIn   map[int64]bool // batch restriction (nil for all)
	arena      cArena
	rootReq    []int64
	rootForb   []int64
	sharingID  int64 // trait id of MISC_SHARES_VIA_AGGREGATE (-1 if none)
	traitNames map[int64]string
}

func (s *cSearch) anchorOK(w *cWorld, root int64) bool {
	if s.anchorIn != nil && !s.anchorIn[root] {
		return false
	}
	if len(s.rootReq) == 0 && len(s.rootForb) == 0 {
		return true
	}
	r := w.get(root)
	if r == nil || r.parent != 0 {
		return false
	}
	for _, t := range s.rootReq {
		if !r.hasTrait(t) {
			return false
		}
	}
	for _, t := range s.rootForb {
		if r.hasTrait(t) {
			return false
		}
	}
	return true
}

// findCandidates answers the request at microversion v as the JSON body.
// cResult is a found answer, written by its write method.
type cResult struct {
	s     *cSearch
	areqs []*cAreq
	sums  []*cProv
	v     web.Version
}

// findCandidates finds the answer to req at microversion v.
func (h *Handler) findCandidates(ctx context.Context, req *candRequest, v web.Version) (*cResult, error) {
	s := &cSearch{req: req, classNames: map[int32]string{}, sharingID: -1, traitNames: map[int64]string{}}
	traitNames := []string{"MISC_SHARES_VIA_AGGREGATE"}
	traitNames = append(traitNames, req.rootRequired...)
	traitNames = append(traitNames, req.rootForbidden...)
	for _, g := range req.groups {
		for _, set := range g.required {
			traitNames = append(traitNames, set...)
		}
		traitNames = append(traitNames, g.forbidden...)
	}
	// The classes, the traits named, the context and (when all trees are
	// in play: no limit, member_of or in_tree) the world are read in one
	// round trip.
	direct := req.limit == 0
	for _, g := range req.groups {
		if len(g.memberOf) > 0 || (g.inTree != nil && len(g.resources) > 0) {
			direct = false
		}
	}
	classByName := map[string]int32{}
	known := map[string]int64{}
	var cc CandContextRow
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
	}
	var buildWorld func(int64) *cWorld
	if direct {
		wq, build := worldQueries(nil)
		qs = append(qs, wq...)
		buildWorld = build
	}
	err := h.queriesNoJIT(ctx, qs)
	if err != nil {
		return nil, err
	}
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
	if s.rootReq, err = checkTraits(req.rootRequired); err != nil {
		return nil, err
	}
	if s.rootForb, err = checkTraits(req.rootForbidden); err != nil {
		return nil, err
	}
	empty := false
	for _, g := range req.groups {
		gq := &cGroupQ{candGroup: g}
		for _, r := range g.resources {
			id, ok := classByName[r.class]
			if !ok {
				return nil, web.PlacementErr(http.StatusBadRequest, "",
					"Invalid resource class in resources parameter: No such resource class %s.", r.class)
			}
			gq.classes = append(gq.classes, cClass{rc: id, name: r.class, amount: r.amount})
		}
		sort.Slice(gq.classes, func(i, j int) bool { return gq.classes[i].rc < gq.classes[j].rc })
		for _, set := range g.required {
			ids, err := checkTraits(set)
			if err != nil {
				return nil, err
			}
			gq.required = append(gq.required, ids)
		}
		if gq.forbidden, err = checkTraits(g.forbidden); err != nil {
			return nil, err
		}
		if g.inTree != nil && len(gq.classes) > 0 {
			rp, err := h.q.ProviderGet(ctx, *g.inTree)
			if errors.Is(err, pgx.ErrNoRows) {
				empty = true
			} else if err != nil {
				return nil, err
			} else if rp.RootProviderID != nil {
				gq.inTreeRoot = *rp.RootProviderID
			}
		}
		s.groups = append(s.groups, gq)
	}
	if empty {
		return &cResult{s: s, v: v}, nil
	}
	s.hasTrees = cc.HasTrees
	s.hasSharing = cc.HasSharing && s.sharingID >= 0

	randomize := h.randomizeCandidates()
	var areqs []*cAreq
	if req.limit == 0 {
		// With member_of, only the trees near the aggregates can anchor.
		var scope []int64
		for _, g := range s.groups {
			if len(g.memberOf) == 0 {
				continue
			}
			roots, err := h.memberOfRoots(ctx, s, g.memberOf)
			if err != nil {
				return nil, err
			}
			if len(roots) == 0 {
				return &cResult{s: s, v: v}, nil
			}
			s.anchorIn = make(map[int64]bool, len(roots))
			for _, r := range roots {
				s.anchorIn[r] = true
			}
			if scope, err = h.withSharingRoots(ctx, s, roots); err != nil {
				return nil, err
			}
			break
		}
		var w *cWorld
		if buildWorld != nil {
			w = buildWorld(s.sharingID)
		} else if w, err = h.loadWorld(ctx, scope, s.sharingID); err != nil {
			return nil, err
		}
		areqs = s.search(w, map[string]bool{})
	} else {
		areqs, err = h.searchBatches(ctx, s, randomize)
		if err != nil {
			return nil, err
		}
	}

	// Before 1.29 a candidate may not use two providers of one tree.
	var keepProvs map[int64]bool
	if !v.AtLeast(1, 29) && s.hasTrees {
		keepProvs = map[int64]bool{}
		kept := areqs[:0]
		for _, a := range areqs {
			roots := map[int64]bool{}
			ps := map[int64]bool{}
			for _, rr := range a.rrs {
				roots[rr.p.root] = true
				ps[rr.p.id] = true
			}
			if len(roots) == len(ps) {
				kept = append(kept, a)
				for id := range ps {
					keepProvs[id] = true
				}
			}
		}
		areqs = kept
	}
	if req.limit > 0 && req.limit < len(areqs) {
		if randomize {
			rand.Shuffle(len(areqs), func(i, j int) { areqs[i], areqs[j] = areqs[j], areqs[i] })
		}
		areqs = areqs[:req.limit]
	} else if randomize {
		rand.Shuffle(len(areqs), func(i, j int) { areqs[i], areqs[j] = areqs[j], areqs[i] })
	}

	// Provider summaries: every provider of the trees used, by root id
	// (a tree loaded by two batches is summarized once).
	var roots []*cProv
	for _, a := range areqs {
		for _, rr := range a.rrs {
			if r := rr.p.rootP; r != nil && !r.mark {
				r.mark = true
				roots = append(roots, r)
			}
		}
	}
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
	if err := h.traitNamesFor(ctx, s, sums, v); err != nil {
		return nil, err
	}
	return &cResult{s: s, areqs: areqs, sums: sums, v: v}, nil
}

// traitIDNames caches trait names by id per handler (a trait's name
// never changes and ids are not reused).
var traitIDNames sync.Map // *Handler -> *sync.Map of int64 -> string

// traitNamesFor fills s.traitNames for the traits of the summaries.
func (h *Handler) traitNamesFor(ctx context.Context, s *cSearch, sums []*cProv, v web.Version) error {
	if !v.AtLeast(1, 17) {
		return nil
	}
	cacheV, _ := traitIDNames.LoadOrStore(h, &sync.Map{})
	cache := cacheV.(*sync.Map)
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
	rows, err := h.q.CandTraitNames(ctx, missing)
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
func (h *Handler) searchBatches(ctx context.Context, s *cSearch, randomize bool) ([]*cAreq, error) {
	limit := s.req.limit
	var after, start int64 // start: the random first root id (0: none)
	wrapped := false
	if randomize {
		var lo, hi *int64
		if err := h.pool.QueryRow(ctx, `SELECT min(id), max(id) FROM placement.resource_providers`).Scan(&lo, &hi); err != nil {
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
	for len(out) < limit {
		roots, err := h.candidateRoots(ctx, s, after, batch)
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
			scope, err := h.withSharingRoots(ctx, s, roots)
			if err != nil {
				return nil, err
			}
			w, err := h.loadWorld(ctx, scope, s.sharingID)
			if err != nil {
				return nil, err
			}
			out = append(out, s.search(w, seen)...)
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
func (h *Handler) withSharingRoots(ctx context.Context, s *cSearch, roots []int64) ([]int64, error) {
	scope := append(make([]int64, 0, len(roots)), roots...)
	if !s.hasSharing {
		return scope, nil
	}
	shared, err := h.q.CandSharingRootsFor(ctx, CandSharingRootsForParams{SharingTrait: s.sharingID, Roots: roots})
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

// memberOfRoots returns the roots that may anchor a candidate of a group
// with member_of sets: those of the providers in the aggregates, and those
// of the providers sharing an aggregate with a sharing provider in them.
func (h *Handler) memberOfRoots(ctx context.Context, s *cSearch, memberOf [][]uuid.UUID) ([]int64, error) {
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
	err := h.queryNoJIT(ctx, sb.String(), args, func(r pgx.Rows) error {
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
func (h *Handler) candidateRoots(ctx context.Context, s *cSearch, after int64, lim int) ([]int64, error) {
	sql, args := candidateRootsSQL(s, after, lim)
	var out []int64
	err := h.queryNoJIT(ctx, sql, args, func(r pgx.Rows) error {
		var id int64
		err := r.Scan(&id)
		out = append(out, id)
		return err
	})
	return out, err
}

// cQuery is a query and the function scanning each of its rows.
type cQuery struct {
	sql  string
	args []any
	scan func(pgx.Rows) error
}

// queryNoJIT runs one query in a read-only transaction with PostgreSQL's
// JIT compilation off (the planner's cost estimates for these scans can
// pass jit_above_cost, and compiling costs far more than running them),
// all in one round trip, calling scan for every row.
func (h *Handler) queryNoJIT(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) error {
	return h.queriesNoJIT(ctx, []cQuery{{sql, args, scan}})
}

// queriesNoJIT runs queries as queryNoJIT does, in one repeatable-read
// transaction (one snapshot) and one round trip.
func (h *Handler) queriesNoJIT(ctx context.Context, qs []cQuery) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	b.Queue("SET LOCAL jit = off")
	for _, q := range qs {
		b.Queue(q.sql, q.args...)
	}
	b.Queue("COMMIT")
	br := h.pool.SendBatch(ctx, b)
	defer br.Close()
	for i := 0; i < 2; i++ {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	for _, q := range qs {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := q.scan(rows); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	return br.Close()
}

// rawBinary returns the row's values when every column is in binary
// format (as pgx asks for integers, floats and uuids) and none is NULL
// except where the caller allows it, for decoding without reflection.
func rawBinary(r pgx.Rows) ([][]byte, bool) {
	for _, fd := range r.FieldDescriptions() {
		if fd.Format != pgx.BinaryFormatCode {
			return nil, false
		}
	}
	return r.RawValues(), true
}

// rawInt decodes a binary int2/int4/int8 (0 for NULL).
func rawInt(b []byte) int64 {
	switch len(b) {
	case 2:
		return int64(int16(binary.BigEndian.Uint16(b)))
	case 4:
		return int64(int32(binary.BigEndian.Uint32(b)))
	case 8:
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}

// candidateRootsSQL builds candidateRoots' query. Its EXISTS subqueries
// end in OFFSET 0 so that PostgreSQL keeps them as per-row checks (which
// stop at the first match and at the LIMIT) instead of hashing the
// whole inventory.
func candidateRootsSQL(s *cSearch, after int64, lim int) (string, []any) {
	minAmount := map[int32]int64{}
	var classes []int32
	for _, g := range s.groups {
		for _, c := range g.classes {
			if m, ok := minAmount[c.rc]; !ok {
				minAmount[c.rc] = c.amount
				classes = append(classes, c.rc)
			} else if c.amount < m {
				minAmount[c.rc] = c.amount
			}
		}
	}
	var sb strings.Builder
	args := []any{after}
	arg := func(a any) string {
		args = append(args, a)
		return "$" + strconv.Itoa(len(args))
	}
	sb.WriteString(`SELECT r.id FROM placement.resource_providers r WHERE r.id > $1 AND r.id = r.root_provider_id`)
	tree := "r.id"
	if s.hasTrees {
		tree = "ANY(ARRAY(SELECT p.id FROM placement.resource_providers p WHERE p.root_provider_id = r.id))"
	}
	// One group on flat providers (no trees, no sharing): a root is a
	// candidate only by itself, so its traits and free capacity can be
	// checked here too, and a batch of roots is nearly all hits (the Go
	// search still checks everything).
	flat := !s.hasTrees && !s.hasSharing && len(s.groups) == 1
	if flat {
		g := s.groups[0]
		for _, anyOf := range g.required {
			fmt.Fprintf(&sb, ` AND EXISTS (SELECT 1 FROM placement.resource_provider_traits t
				WHERE t.resource_provider_id = r.id AND t.trait_id = ANY(%s::bigint[]))`, arg(anyOf))
		}
		if len(g.forbidden) > 0 {
			fmt.Fprintf(&sb, ` AND NOT EXISTS (SELECT 1 FROM placement.resource_provider_traits t
				WHERE t.resource_provider_id = r.id AND t.trait_id = ANY(%s::bigint[]))`, arg(g.forbidden))
		}
	}
	for _, rc := range classes {
		c, a := arg(rc), arg(minAmount[rc])
		static := fmt.Sprintf(`i.resource_class_id = %[1]s AND i.min_unit <= %[2]s AND i.max_unit >= %[2]s
			AND %[2]s %% i.step_size = 0 AND %[2]s <= (i.total - i.reserved) * i.allocation_ratio`, c, a)
		if flat {
			static += fmt.Sprintf(` AND %s <= (i.total - i.reserved) * i.allocation_ratio - COALESCE((SELECT sum(a.used)
				FROM placement.allocations a WHERE a.resource_provider_id = i.resource_provider_id
				AND a.resource_class_id = i.resource_class_id), 0)`, a)
		}
		fmt.Fprintf(&sb, ` AND (EXISTS (SELECT 1 FROM placement.inventories i WHERE i.resource_provider_id = %s AND %s OFFSET 0)`, tree, static)
		if s.hasSharing {
			fmt.Fprintf(&sb, ` OR EXISTS (SELECT 1 FROM placement.resource_provider_aggregates ra
				JOIN placement.resource_provider_aggregates sa ON sa.aggregate_uuid = ra.aggregate_uuid
				JOIN placement.resource_provider_traits st ON st.resource_provider_id = sa.resource_provider_id AND st.trait_id = %s
				JOIN placement.inventories i ON i.resource_provider_id = sa.resource_provider_id
				WHERE ra.resource_provider_id = %s AND %s OFFSET 0)`, arg(s.sharingID), tree, static)
		}
		sb.WriteString(")")
	}
	sb.WriteString(" ORDER BY r.id")
	if lim > 0 {
		sb.WriteString(" LIMIT " + arg(int64(lim)))
	}
	return sb.String(), args
}

// loadWorld loads the trees of roots (all trees when nil).
func (h *Handler) loadWorld(ctx context.Context, roots []int64, sharingID int64) (*cWorld, error) {
	qs, build := worldQueries(roots)
	if err := h.queriesNoJIT(ctx, qs); err != nil {
		return nil, err
	}
	return build(sharingID), nil
}

// worldQueries returns the queries loading the trees of roots (all trees
// when nil) and the function building the world from their rows.
func worldQueries(roots []int64) ([]cQuery, func(sharingID int64) *cWorld) {
	// The five queries run in one batch: one round trip, one snapshot.
	// Rows are decoded straight from their binary form into flat slices
	// and then spread over the providers with one allocation per kind.
	rows := worldRowsPool.Get().(*worldRows)
	rows.provs, rows.traits, rows.aggs, rows.invs, rows.usage = rows.provs[:0], rows.traits[:0], rows.aggs[:0], rows.invs[:0], rows.usage[:0]
	var rootsArg []any
	provSQL, traitSQL, aggSQL, invSQL, usageSQL := candProvidersAll, candTraitsAll, candAggregatesAll, candInventoriesAll, candUsageAll
	if roots != nil {
		rootsArg = []any{roots}
		provSQL, traitSQL, aggSQL, invSQL, usageSQL = candProvidersIn, candTraitsIn, candAggregatesIn, candInventoriesIn, candUsageIn
	}
	qs := []cQuery{
		{provSQL, rootsArg, func(r pgx.Rows) error {
			var p provRow
			if v, ok := rawBinary(r); ok && len(v[0]) == 8 && len(v[1]) == 16 {
				p.id = rawInt(v[0])
				copy(p.uuid[:], v[1])
				p.parent = rawInt(v[2])
				p.root = rawInt(v[3])
			} else {
				var parent, root *int64
				if err := r.Scan(&p.id, &p.uuid, &parent, &root); err != nil {
					return err
				}
				if parent != nil {
					p.parent = *parent
				}
				if root != nil {
					p.root = *root
				}
			}
			if p.root == 0 {
				p.root = p.id
			}
			rows.provs = append(rows.provs, p)
			return nil
		}},
		{traitSQL, rootsArg, func(r pgx.Rows) error {
			if v, ok := rawBinary(r); ok && len(v[0]) == 8 && len(v[1]) == 8 {
				rows.traits = append(rows.traits, traitRow{rawInt(v[0]), rawInt(v[1])})
				return nil
			}
			var t traitRow
			err := r.Scan(&t.pid, &t.trait)
			rows.traits = append(rows.traits, t)
			return err
		}},
		{aggSQL, rootsArg, func(r pgx.Rows) error {
			var a aggRow
			if v, ok := rawBinary(r); ok && len(v[0]) == 8 && len(v[1]) == 16 {
				a.pid = rawInt(v[0])
				copy(a.agg[:], v[1])
				rows.aggs = append(rows.aggs, a)
				return nil
			}
			err := r.Scan(&a.pid, &a.agg)
			rows.aggs = append(rows.aggs, a)
			return err
		}},
		{invSQL, rootsArg, func(r pgx.Rows) error {
			// NULL columns are at their usual values (see the query).
			var x invRow
			if v, ok := rawBinary(r); ok && len(v[0]) == 8 && len(v[2]) == 4 && (v[7] == nil || len(v[7]) == 8) {
				x.pid, x.inv.rc, x.inv.total = rawInt(v[0]), int32(rawInt(v[1])), int32(rawInt(v[2]))
				x.inv.reserved, x.inv.minUnit, x.inv.maxUnit, x.inv.step = 0, 1, x.inv.total, 1
				if v[3] != nil {
					x.inv.reserved = int32(rawInt(v[3]))
				}
				if v[4] != nil {
					x.inv.minUnit = int32(rawInt(v[4]))
				}
				if v[5] != nil {
					x.inv.maxUnit = int32(rawInt(v[5]))
				}
				if v[6] != nil {
					x.inv.step = int32(rawInt(v[6]))
				}
				x.inv.ratio = 1
				if v[7] != nil {
					x.inv.ratio = math.Float64frombits(binary.BigEndian.Uint64(v[7]))
				}
				rows.invs = append(rows.invs, x)
				return nil
			}
			var reserved, minUnit, maxUnit, step *int32
			var ratio *float64
			if err := r.Scan(&x.pid, &x.inv.rc, &x.inv.total, &reserved, &minUnit, &maxUnit, &step, &ratio); err != nil {
				return err
			}
			x.inv.reserved, x.inv.minUnit, x.inv.maxUnit, x.inv.step, x.inv.ratio = 0, 1, x.inv.total, 1, 1
			if reserved != nil {
				x.inv.reserved = *reserved
			}
			if minUnit != nil {
				x.inv.minUnit = *minUnit
			}
			if maxUnit != nil {
				x.inv.maxUnit = *maxUnit
			}
			if step != nil {
				x.inv.step = *step
			}
			if ratio != nil {
				x.inv.ratio = *ratio
			}
			rows.invs = append(rows.invs, x)
			return nil
		}},
		{usageSQL, rootsArg, func(r pgx.Rows) error {
			var u usageRow
			if v, ok := rawBinary(r); ok && len(v[0]) == 8 && len(v[2]) == 8 {
				u.pid, u.rc, u.used = rawInt(v[0]), int32(rawInt(v[1])), rawInt(v[2])
				rows.usage = append(rows.usage, u)
				return nil
			}
			err := r.Scan(&u.pid, &u.rc, &u.used)
			rows.usage = append(rows.usage, u)
			return err
		}},
	}
	return qs, func(sharingID int64) *cWorld {
		w := buildWorld(rows, sharingID)
		if len(rows.invs) <= 1<<16 && len(rows.traits) <= 1<<16 {
			worldRowsPool.Put(rows)
		}
		return w
	}
}

// worldRows is the rows read by worldQueries (reused between requests).
type worldRows struct {
	provs  []provRow
	traits []traitRow
	aggs   []aggRow
	invs   []invRow
	usage  []usageRow
}

var worldRowsPool = sync.Pool{New: func() any { return new(worldRows) }}

type (
	provRow struct {
		id, parent, root int64
		uuid             uuid.UUID
	}
	invRow struct {
		pid int64
		inv cInv
	}
	usageRow struct {
		pid  int64
		rc   int32
		used int64
	}
	traitRow struct{ pid, trait int64 }
	aggRow   struct {
		pid int64
		agg uuid.UUID
	}
)

// buildWorld builds the world from the rows of worldQueries.
func buildWorld(rows *worldRows, sharingID int64) *cWorld {
	w := &cWorld{sharingAnchors: map[int64][]int64{}}
	traits, aggs, invs, usage := rows.traits, rows.aggs, rows.invs, rows.usage
	byID := func(a, b provRow) int { return cmp.Compare(a.id, b.id) }
	if !slices.IsSortedFunc(rows.provs, byID) {
		slices.SortFunc(rows.provs, byID)
	}
	store := make([]cProv, len(rows.provs))
	for i, r := range rows.provs {
		store[i] = cProv{id: r.id, parent: r.parent, root: r.root, uuid: r.uuid}
	}
	n := len(store)
	w.order = make([]*cProv, n)
	if n > 0 && store[n-1].id-store[0].id < int64(4*n+1024) {
		w.base = store[0].id
		w.dense = make([]*cProv, store[n-1].id-store[0].id+1)
	} else {
		w.provs = make(map[int64]*cProv, n)
	}
	for i := range store {
		p := &store[i]
		if w.dense != nil {
			w.dense[p.id-w.base] = p
		} else {
			w.provs[p.id] = p
		}
		w.order[i] = p
		p.ix = int32(i)
	}
	for _, p := range w.order {
		p.rootP = w.get(p.root)
		if p.parent != 0 {
			p.parentP = w.get(p.parent)
		}
		if p.root == p.id {
			w.rootOrder = append(w.rootOrder, p)
		}
	}
	// Trees: contiguous runs of the providers ordered by (root, id).
	nested := false
	for _, p := range w.order {
		if p.root != p.id {
			nested = true
			break
		}
	}
	byRoot := w.order
	if nested {
		byRoot = append([]*cProv(nil), w.order...)
		sort.SliceStable(byRoot, func(i, j int) bool { return byRoot[i].root < byRoot[j].root })
	}
	for i := 0; i < len(byRoot); {
		j := i + 1
		for j < len(byRoot) && byRoot[j].root == byRoot[i].root {
			j++
		}
		if r := w.get(byRoot[i].root); r != nil {
			r.tree = byRoot[i:j:j]
		}
		i = j
	}
	// Spread the rows over the providers (in row order), each kind in one
	// backing array.
	spread(w, invs, func(x invRow) int64 { return x.pid }, func(p *cProv) *[]cInv { return &p.inv },
		func(x invRow) cInv { return x.inv })
	for _, u := range usage {
		if p := w.get(u.pid); p != nil {
			if inv := p.invFor(u.rc); inv != nil {
				inv.used = u.used
			}
		}
	}
	spread(w, traits, func(t traitRow) int64 { return t.pid }, func(p *cProv) *[]int64 { return &p.traits },
		func(t traitRow) int64 { return t.trait })
	for _, t := range traits {
		if t.trait == sharingID {
			if p := w.get(t.pid); p != nil {
				p.sharing = true
			}
		}
	}
	spread(w, aggs, func(a aggRow) int64 { return a.pid }, func(p *cProv) *[]uuid.UUID { return &p.aggs },
		func(a aggRow) uuid.UUID { return a.agg })
	// Anchors of sharing providers: the roots of the providers sharing an
	// aggregate with them (their own included when they are in one).
	var sharing []*cProv
	for _, p := range w.order {
		if p.sharing && len(p.aggs) > 0 {
			sharing = append(sharing, p)
		}
	}
	if len(sharing) > 0 {
		byAgg := map[uuid.UUID][]int64{}
		for _, p := range w.order {
			for _, a := range p.aggs {
				byAgg[a] = append(byAgg[a], p.root)
			}
		}
		for _, sp := range sharing {
			set := map[int64]bool{}
			for _, a := range sp.aggs {
				for _, r := range byAgg[a] {
					set[r] = true
				}
			}
			list := make([]int64, 0, len(set))
			for r := range set {
				list = append(list, r)
			}
			sort.Slice(list, func(i, j int) bool { return list[i] < list[j] })
			w.sharingAnchors[sp.id] = list
		}
	}
	return w
}

// spread appends the value of each row to the list field of its provider
// (rows of providers not in w are skipped), all lists sharing one backing
// array sized by a first counting pass.
func spread[R, V any](w *cWorld, rows []R, pid func(R) int64, field func(*cProv) *[]V, val func(R) V) {
	if len(rows) == 0 || len(w.order) == 0 {
		return
	}
	count := make([]int32, len(w.order)) // by position in w.order
	for _, r := range rows {
		if p := w.get(pid(r)); p != nil {
			count[p.ix]++
		}
	}
	back := make([]V, len(rows))
	off := 0
	for i, p := range w.order {
		c := int(count[i])
		*field(p) = back[off : off : off+c]
		off += c
	}
	for _, r := range rows {
		if p := w.get(pid(r)); p != nil {
			f := field(p)
			*f = append(*f, val(r))
		}
	}
}

// search matches every group in w and merges them; seen dedups merged
// candidates (also across batches).
func (s *cSearch) search(w *cWorld, seen map[string]bool) []*cAreq {
	groupAreqs := func(gi int) []*cAreq {
		g := s.groups[gi]
		if g.sameProvider || len(g.classes) == 0 {
			return s.singleProvider(w, gi, g)
		}
		return s.multiProvider(w, gi, g)
	}
	if len(s.groups) == 1 {
		// One group: its requests are the candidates.
		areqs := groupAreqs(0)
		out := areqs[:0]
		var keyBuf []byte
		for _, a := range areqs {
			a.one[0] = a.provs
			a.mappings = a.one[:]
			if a.needsKey() {
				keyBuf = a.key(keyBuf)
				if seen[string(keyBuf)] {
					continue
				}
				seen[string(keyBuf)] = true
			}
			out = append(out, a)
		}
		return out
	}
	perGroup := make([]map[int64][]*cAreq, len(s.groups))
	for gi := range s.groups {
		areqs := groupAreqs(gi)
		if len(areqs) == 0 {
			return nil
		}
		m := map[int64][]*cAreq{}
		for _, a := range areqs {
			m[a.anchor] = append(m[a.anchor], a)
		}
		perGroup[gi] = m
	}
	var anchors []int64
	for a := range perGroup[0] {
		ok := true
		for _, m := range perGroup[1:] {
			if len(m[a]) == 0 {
				ok = false
				break
			}
		}
		if ok {
			anchors = append(anchors, a)
		}
	}
	sort.Slice(anchors, func(i, j int) bool { return anchors[i] < anchors[j] })
	numGranular := 0
	for _, g := range s.groups {
		if g.sameProvider {
			numGranular++
		}
	}
	var out []*cAreq
	var keyBuf []byte
	idx := make([]int, len(s.groups))
	pick := make([]*cAreq, len(s.groups))
	for _, anchor := range anchors {
		lists := make([][]*cAreq, len(s.groups))
		for gi := range s.groups {
			lists[gi] = perGroup[gi][anchor]
			idx[gi] = 0
		}
		for {
			for gi := range lists {
				pick[gi] = lists[gi][idx[gi]]
			}
			if a := s.merge(w, anchor, pick, numGranular); a != nil {
				if a.needsKey() {
					keyBuf = a.key(keyBuf)
					if seen[string(keyBuf)] {
						goto next
					}
					seen[string(keyBuf)] = true
				}
				out = append(out, a)
			}
		next:
			// next combination
			gi := len(lists) - 1
			for ; gi >= 0; gi-- {
				idx[gi]++
				if idx[gi] < len(lists[gi]) {
					break
				}
				idx[gi] = 0
			}
			if gi < 0 {
				break
			}
		}
	}
	return out
}

// merge combines one allocation request per group, applying group_policy,
// same_subtree and the final capacity check (nil when they fail).
func (s *cSearch) merge(w *cWorld, anchor int64, pick []*cAreq, numGranular int) *cAreq {
	if s.req.groupPolicy == "isolate" && numGranular > 0 {
		ids := map[int64]bool{}
		for gi, a := range pick {
			if s.groups[gi].sameProvider {
				ids[a.provs[0].id] = true
			}
		}
		if len(ids) != numGranular {
			return nil
		}
	}
	for _, set := range s.req.sameSubtrees {
		var ps []*cProv
		for gi, a := range pick {
			if contains(set, s.groups[gi].suffix) {
				for _, p := range a.provs {
					if !containsProv(ps, p) {
						ps = append(ps, p)
					}
				}
			}
		}
		if !sameSubtree(w, ps) {
			return nil
		}
	}
	m := &cAreq{anchor: anchor, mappings: make([][]*cProv, len(pick))}
	for gi, a := range pick {
		m.mappings[gi] = a.provs
		for _, rr := range a.rrs {
			merged := false
			for i := range m.rrs {
				if m.rrs[i].p == rr.p && m.rrs[i].rc == rr.rc {
					m.rrs[i].amount += rr.amount
					merged = true
					break
				}
			}
			if !merged {
				m.rrs = append(m.rrs, rr)
			}
		}
	}
	for _, rr := range m.rrs {
		inv := rr.p.invFor(rr.rc)
		if inv.used+rr.amount > inv.capacity() || rr.amount > int64(inv.maxUnit) {
			return nil
		}
	}
	return m
}

func containsProv(list []*cProv, p *cProv) bool {
	for _, x := range list {
		if x == p {
			return true
		}
	}
	return false
}

// sameSubtree tells whether one of ps is an ancestor (or self) of all.
func sameSubtree(w *cWorld, ps []*cProv) bool {
	if len(ps) <= 1 {
		return true
	}
	for _, cand := range ps {
		all := true
		for _, p := range ps {
			if !isAncestor(w, cand, p) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func isAncestor(w *cWorld, anc, p *cProv) bool {
	for p != nil {
		if p == anc {
			return true
		}
		if p.parent == 0 {
			return false
		}
		p = w.get(p.parent)
	}
	return false
}

// key identifies a merged request: its amounts (by provider and class)
// and mappings, in a compact binary form.
func (a *cAreq) key(buf []byte) []byte {
	rrs := a.rrs
	if !sort.SliceIsSorted(rrs, func(i, j int) bool { return rrLess(rrs[i], rrs[j]) }) {
		rrs = append([]cRR(nil), rrs...)
		sort.Slice(rrs, func(i, j int) bool { return rrLess(rrs[i], rrs[j]) })
	}
	buf = buf[:0]
	for _, rr := range rrs {
		buf = binary.AppendUvarint(buf, uint64(rr.p.id))
		buf = binary.AppendUvarint(buf, uint64(rr.rc))
		buf = binary.AppendUvarint(buf, uint64(rr.amount))
	}
	for _, ps := range a.mappings {
		buf = append(buf, 0xff)
		if len(ps) == 1 {
			buf = binary.AppendUvarint(buf, uint64(ps[0].id))
			continue
		}
		ids := make([]int64, len(ps))
		for i, p := range ps {
			ids[i] = p.id
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			buf = binary.AppendUvarint(buf, uint64(id))
		}
	}
	return buf
}

func rrLess(a, b cRR) bool {
	if a.p.id != b.p.id {
		return a.p.id < b.p.id
	}
	return a.rc < b.rc
}

// traitsOK checks required (ANDed any-of sets, against the union of the
// providers' traits) and forbidden traits (on none of them).
func traitsOK(ps []*cProv, required [][]int64, forbidden []int64) bool {
	for _, p := range ps {
		for _, t := range forbidden {
			if p.hasTrait(t) {
				return false
			}
		}
	}
	for _, set := range required {
		found := false
		for _, t := range set {
			for _, p := range ps {
				if p.hasTrait(t) {
					found = true
					break
				}
			}
			if found {
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// singleProvider matches a group whose resources come from one provider
// (granular groups; resourceless groups), as Placement's
// get_provider_ids_matching and _alloc_candidates_single_provider.
func (s *cSearch) singleProvider(w *cWorld, gi int, g *cGroupQ) []*cAreq {
	if len(g.classes) == 0 && len(g.required) == 0 && len(g.memberOf) == 0 {
		// Placement finds nothing for a group without any filter.
		return nil
	}
	var out []*cAreq
	for _, p := range w.order {
		if len(g.classes) > 0 && g.inTreeRoot != 0 && p.root != g.inTreeRoot {
			continue
		}
		ok := true
		for _, c := range g.classes {
			inv := p.invFor(c.rc)
			if inv == nil || !inv.fits(c.amount) {
				ok = false
				break
			}
		}
		if !ok || !traitsOK([]*cProv{p}, g.required, g.forbidden) {
			continue
		}
		if len(g.memberOf) > 0 && !p.inAllAggs(g.memberOf) {
			continue
		}
		if len(g.forbiddenAggs) > 0 && p.inAnyAgg(g.forbiddenAggs) {
			continue
		}
		rrs := make([]cRR, len(g.classes))
		for i, c := range g.classes {
			rrs[i] = cRR{p: p, rc: c.rc, amount: c.amount}
		}
		provs := []*cProv{p}
		if s.anchorOK(w, p.root) {
			out = append(out, &cAreq{anchor: p.root, rrs: rrs, provs: provs, group: gi})
		}
		if p.sharing {
			for _, a := range w.sharingAnchors[p.id] {
				if a != p.root && s.anchorOK(w, a) {
					out = append(out, &cAreq{anchor: a, rrs: rrs, provs: provs, group: gi})
				}
			}
		}
	}
	return out
}

// multiProvider matches the unsuffixed group: each class from any provider
// of a tree or from a sharing provider in an aggregate with it, as
// Placement's get_trees_matching_all and
// _alloc_candidates_multiple_providers. Trees are taken one at a time (in
// root id order) as anchors.
func (s *cSearch) multiProvider(w *cWorld, gi int, g *cGroupQ) []*cAreq {
	// Sharing providers by the anchors they serve.
	var sharingAt [][]*cProv // by the anchor's position in w.order
	if g.inTreeRoot == 0 {
		for _, p := range w.order {
			if !p.sharing {
				continue
			}
			if len(g.memberOf) > 0 && !p.inAllAggs(g.memberOf) {
				continue
			}
			for _, a := range w.sharingAnchors[p.id] {
				if a == p.root {
					continue
				}
				ap := w.get(a)
				if ap == nil {
					continue
				}
				if sharingAt == nil {
					sharingAt = make([][]*cProv, len(w.order))
				}
				sharingAt[ap.ix] = append(sharingAt[ap.ix], p)
			}
		}
	}
	lists := make([][]*cProv, len(g.classes))
	idx := make([]int, len(g.classes))
	combo := make([]*cProv, len(g.classes))
	var out []*cAreq
	for _, root := range w.rootOrder {
		if g.inTreeRoot != 0 && root.id != g.inTreeRoot {
			continue
		}
		if !s.anchorOK(w, root.id) {
			continue
		}
		anchorInAggs := len(g.memberOf) == 0 || root.inAllAggs(g.memberOf)
		anchorForbidden := len(g.forbiddenAggs) > 0 && root.inAnyAgg(g.forbiddenAggs)
		if anchorForbidden {
			continue
		}
		ok := true
		for ci, c := range g.classes {
			l := lists[ci][:0]
			consider := func(p *cProv) {
				inv := p.invFor(c.rc)
				if inv == nil || !inv.fits(c.amount) {
					return
				}
				if !anchorInAggs && !p.inAllAggs(g.memberOf) {
					return
				}
				if len(g.forbiddenAggs) > 0 && p.inAnyAgg(g.forbiddenAggs) {
					return
				}
				l = append(l, p)
			}
			for _, p := range root.tree {
				consider(p)
			}
			var shared []*cProv
			if sharingAt != nil {
				shared = sharingAt[root.ix]
			}
			for _, p := range shared {
				consider(p)
			}
			lists[ci] = l
			if len(l) == 0 {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		for ci := range idx {
			idx[ci] = 0
		}
		for {
			for ci := range lists {
				combo[ci] = lists[ci][idx[ci]]
			}
			if traitsOK(combo, g.required, g.forbidden) {
				a := s.arena.areq()
				a.anchor, a.group = root.id, gi
				a.rrs = s.arena.rrSlice(len(combo))
				a.provs = s.arena.provSlice(len(combo))
				for ci, p := range combo {
					a.rrs[ci] = cRR{p: p, rc: g.classes[ci].rc, amount: g.classes[ci].amount}
					if !containsProv(a.provs, p) {
						a.provs = append(a.provs, p)
					}
				}
				out = append(out, a)
			}
			ci := len(lists) - 1
			for ; ci >= 0; ci-- {
				idx[ci]++
				if idx[ci] < len(lists[ci]) {
					break
				}
				idx[ci] = 0
			}
			if ci < 0 {
				break
			}
		}
	}
	return out
}

// appendQuotedUUID appends u in its canonical text form, quoted.
func appendQuotedUUID(b []byte, u *uuid.UUID) []byte {
	const hexd = "0123456789abcdef"
	b = append(b, '"')
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexd[c>>4], hexd[c&15])
	}
	return append(b, '"')
}

// write writes the response body to w, in chunks (an answer for 100,000
// providers is 80 MB of JSON; it is never held whole).
func (r *cResult) write(w io.Writer) error {
	return r.s.render(w, r.areqs, r.sums, r.v)
}

// render writes the response body at microversion v to out.
func (s *cSearch) render(out io.Writer, areqs []*cAreq, sums []*cProv, v web.Version) error {
	const chunk = 64 << 10
	b := make([]byte, 0, chunk+4096)
	var werr error
	flush := func(force bool) {
		if (force || len(b) >= chunk) && werr == nil {
			_, werr = out.Write(b)
			b = b[:0]
		}
	}
	str := func(x string) { b = append(b, x...) }
	quoted := func(x string) { b = append(b, '"'); b = append(b, x...); b = append(b, '"') }
	quotedUUID := func(p *cProv) { b = append(b, p.quotedUUID()...) }
	var classNames []string
	for id, n := range s.classNames {
		if id >= 0 && id < 1<<16 {
			if int(id) >= len(classNames) {
				classNames = append(classNames, make([]string, int(id)+1-len(classNames))...)
			}
			classNames[id] = n
		}
	}
	className := func(rc int32) string {
		if rc >= 0 && int(rc) < len(classNames) {
			return classNames[rc]
		}
		return s.classNames[rc]
	}
	num := func(n int64) { b = strconv.AppendInt(b, n, 10) }
	str(`{"allocation_requests": [`)
	dict := v.AtLeast(1, 12)
	var ps, us []*cProv
	for i, a := range areqs {
		if i > 0 {
			str(", ")
		}
		// providers in order of first appearance
		ps = ps[:0]
		for _, rr := range a.rrs {
			if !containsProv(ps, rr.p) {
				ps = append(ps, rr.p)
			}
		}
		if dict {
			str(`{"allocations": {`)
		} else {
			str(`{"allocations": [`)
		}
		for j, p := range ps {
			if j > 0 {
				str(", ")
			}
			if dict {
				quotedUUID(p)
				str(`: {"resources": {`)
			} else {
				str(`{"resource_provider": {"uuid": `)
				quotedUUID(p)
				str(`}, "resources": {`)
			}
			k := 0
			for _, rr := range a.rrs {
				if rr.p != p {
					continue
				}
				if k > 0 {
					str(", ")
				}
				k++
				quoted(className(rr.rc))
				str(": ")
				num(rr.amount)
			}
			str("}}")
		}
		if dict {
			str("}")
		} else {
			str("]")
		}
		if v.AtLeast(1, 34) {
			str(`, "mappings": {`)
			for gi, mp := range a.mappings {
				if gi > 0 {
					str(", ")
				}
				quoted(s.groups[gi].suffix)
				str(": [")
				if len(mp) == 1 {
					quotedUUID(mp[0])
					str("]")
					continue
				}
				us = append(us[:0], mp...)
				slices.SortFunc(us, func(x, y *cProv) int { return bytes.Compare(x.quotedUUID(), y.quotedUUID()) })
				for k, u := range us {
					if k > 0 {
						str(", ")
					}
					quotedUUID(u)
				}
				str("]")
			}
			str("}")
		}
		str("}")
		flush(false)
	}
	str(`], "provider_summaries": {`)
	allRes := v.AtLeast(1, 27)
	requested := map[int32]bool{}
	for _, g := range s.groups {
		for _, c := range g.classes {
			requested[c.rc] = true
		}
	}
	var names []string
	var key []byte
	traitJSON := map[string][]byte{}
	for i, p := range sums {
		if i > 0 {
			str(", ")
		}
		quotedUUID(p)
		str(`: {"resources": {`)
		k := 0
		for _, inv := range p.inv {
			if !allRes && !requested[inv.rc] {
				continue
			}
			if k > 0 {
				str(", ")
			}
			k++
			quoted(className(inv.rc))
			str(`: {"capacity": `)
			num(inv.capacity())
			str(`, "used": `)
			num(inv.used)
			str("}")
		}
		str("}")
		if v.AtLeast(1, 17) {
			// Providers often have the same traits: their JSON list is
			// made once per set.
			key = key[:0]
			for _, t := range p.traits {
				key = binary.AppendUvarint(key, uint64(t))
			}
			frag, ok := traitJSON[string(key)]
			if !ok {
				names = names[:0]
				for _, t := range p.traits {
					if n := s.traitNames[t]; n != "" {
						names = append(names, n)
					}
				}
				sort.Strings(names)
				frag = append([]byte(nil), `, "traits": [`...)
				for k, t := range names {
					if k > 0 {
						frag = append(frag, ", "...)
					}
					frag = append(frag, '"')
					frag = append(frag, t...)
					frag = append(frag, '"')
				}
				frag = append(frag, ']')
				traitJSON[string(key)] = frag
			}
			b = append(b, frag...)
		}
		if v.AtLeast(1, 29) {
			str(`, "parent_provider_uuid": `)
			// At 1.29 and later the summaries hold whole trees, so a
			// loaded parent or root is summarized.
			if pp := p.parentP; p.parent == 0 || pp == nil {
				str("null")
			} else {
				quotedUUID(pp)
			}
			str(`, "root_provider_uuid": `)
			if rp := p.rootP; rp != nil {
				quotedUUID(rp)
			} else {
				str("null")
			}
		}
		str("}")
		flush(false)
	}
	str("}}")
	flush(true)
	return werr
}
