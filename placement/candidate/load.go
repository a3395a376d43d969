package candidate

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

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
func (f *Finder) queryNoJIT(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) error {
	return f.queriesNoJIT(ctx, []cQuery{{sql, args, scan}})
}

// queriesNoJIT runs queries as queryNoJIT does, in one repeatable-read
// transaction (one snapshot) and one round trip.
func (f *Finder) queriesNoJIT(ctx context.Context, qs []cQuery) error {
	return f.queriesWith(ctx, "SET LOCAL jit = off", qs)
}

// queriesWith runs queries as queriesNoJIT does, with settings (one
// statement) run first instead of turning JIT off.
func (f *Finder) queriesWith(ctx context.Context, settings string, qs []cQuery) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	b.Queue(settings)
	for _, q := range qs {
		b.Queue(q.sql, q.args...)
	}
	b.Queue("COMMIT")
	br := f.pool.SendBatch(ctx, b)
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

// rootWalkSettings are the planner settings of candidateRoots' query
// (for its transaction only): JIT off (see queryNoJIT) and no plan but
// the walk in index order that stops at the LIMIT. PostgreSQL takes each
// capacity inequality to match a third of the rows, so it expects few
// rows to pass and would rather fetch every inventory of the class (a
// bitmap scan) or every provider, and sort them: a read of the whole
// class per call, which the walk exists to avoid.
const rootWalkSettings = `SELECT set_config('jit', 'off', true), set_config('enable_sort', 'off', true),
	set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)`

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
	// One group on flat providers (no trees, no sharing): a root is a
	// candidate only by itself, so its traits and free capacity can be
	// checked here too, and a batch of roots is nearly all hits (the Go
	// search still checks everything).
	flat := !s.hasTrees && !s.hasSharing && len(s.groups) == 1
	if flat && len(classes) > 0 {
		return flatRootsSQL(&sb, s.groups[0], classes, minAmount, lim, arg), args
	}
	sb.WriteString(`SELECT r.id FROM placement.resource_providers r WHERE r.id > $1 AND r.id = r.root_provider_id`)
	tree := "r.id"
	if s.hasTrees {
		tree = "ANY(ARRAY(SELECT p.id FROM placement.resource_providers p WHERE p.root_provider_id = r.id))"
	}
	if flat { // and no classes
		g := s.groups[0]
		for _, anyOf := range g.requiredIDs {
			fmt.Fprintf(&sb, ` AND EXISTS (SELECT 1 FROM placement.resource_provider_traits t
				WHERE t.resource_provider_id = r.id AND t.trait_id = ANY(%s::bigint[]))`, arg(anyOf))
		}
		if len(g.forbiddenIDs) > 0 {
			fmt.Fprintf(&sb, ` AND NOT EXISTS (SELECT 1 FROM placement.resource_provider_traits t
				WHERE t.resource_provider_id = r.id AND t.trait_id = ANY(%s::bigint[]))`, arg(g.forbiddenIDs))
		}
	}
	for _, rc := range classes {
		static := capacitySQL("i", arg(rc), arg(minAmount[rc]), false)
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

// capacitySQL is the condition that inventory alias i could hold amount
// (a placeholder) of class rc (a placeholder) by its static columns and,
// with usage, after what is allocated from it.
func capacitySQL(i, rc, amount string, usage bool) string {
	c := fmt.Sprintf(`%[1]s.resource_class_id = %[2]s AND %[1]s.min_unit <= %[3]s AND %[1]s.max_unit >= %[3]s
			AND %[3]s %% %[1]s.step_size = 0 AND %[3]s <= (%[1]s.total - %[1]s.reserved) * %[1]s.allocation_ratio`, i, rc, amount)
	if usage {
		c += fmt.Sprintf(` AND %[2]s <= (%[1]s.total - %[1]s.reserved) * %[1]s.allocation_ratio - COALESCE((SELECT sum(a.used)
				FROM placement.allocations a WHERE a.resource_provider_id = %[1]s.resource_provider_id
				AND a.resource_class_id = %[1]s.resource_class_id), 0)`, i, amount)
	}
	return c
}

// flatRootsSQL is candidateRootsSQL for one group on flat providers
// (every provider its own root): the walk is driven by the inventories of
// the group's first class, in provider order (index
// inventories_class_provider_idx, migration 13), so that it reads only the
// providers that have that class instead of every provider with a probe
// each (at 10,000 bare-metal nodes of 4 classes, four times fewer rows,
// and none of the other classes' inventories). The free capacity of each
// class, the other classes and the traits are per-row checks; EXISTS
// subqueries end in OFFSET 0 so that PostgreSQL keeps them that way
// (stopping at the LIMIT) instead of hashing whole tables. The answer is
// the roots after $1 with every class and trait, in id order. With no
// parents every provider is its own root, so the providers table is not
// read at all (a join on r.root_provider_id = r.id, which PostgreSQL
// estimates as matching 0.5% of the rows, made it scan every provider
// and sort).
func flatRootsSQL(sb *strings.Builder, g *cGroupQ, classes []int32, minAmount map[int32]int64, lim int, arg func(any) string) string {
	rc, amount := arg(classes[0]), arg(minAmount[classes[0]])
	fmt.Fprintf(sb, `SELECT i.resource_provider_id FROM placement.inventories i
		WHERE i.resource_provider_id > $1 AND %s`, capacitySQL("i", rc, amount, true))
	for _, c := range classes[1:] {
		fmt.Fprintf(sb, ` AND EXISTS (SELECT 1 FROM placement.inventories o WHERE o.resource_provider_id = i.resource_provider_id
			AND %s OFFSET 0)`, capacitySQL("o", arg(c), arg(minAmount[c]), true))
	}
	for _, anyOf := range g.requiredIDs {
		fmt.Fprintf(sb, ` AND EXISTS (SELECT 1 FROM placement.resource_provider_traits t
			WHERE t.resource_provider_id = i.resource_provider_id AND t.trait_id = ANY(%s::bigint[]) OFFSET 0)`, arg(anyOf))
	}
	if len(g.forbiddenIDs) > 0 {
		fmt.Fprintf(sb, ` AND NOT EXISTS (SELECT 1 FROM placement.resource_provider_traits t
			WHERE t.resource_provider_id = i.resource_provider_id AND t.trait_id = ANY(%s::bigint[]) OFFSET 0)`, arg(g.forbiddenIDs))
	}
	sb.WriteString(" ORDER BY i.resource_provider_id")
	if lim > 0 {
		sb.WriteString(" LIMIT " + arg(int64(lim)))
	}
	return sb.String()
}

// loadWorld loads the trees of roots, appending their usage to used.
func (f *Finder) loadWorld(ctx context.Context, roots []int64, sharingID int64, used *[]int64) (*cWorld, error) {
	rows := worldRowsPool.Get().(*worldRows)
	rows.reset()
	var usage []usageRow
	args := []any{roots}
	qs := worldQueries([4]string{candProvidersIn, candTraitsIn, candAggregatesIn, candInventoriesIn}, args, rows)
	qs = append(qs, usageQuery(candUsageIn, args, &usage))
	if err := f.queriesNoJIT(ctx, qs); err != nil {
		return nil, err
	}
	w := buildWorld(rows, sharingID, int32(len(*used)))
	*used = append(*used, make([]int64, w.nInv)...)
	w.usageInto(*used, usage)
	if len(rows.invs) <= 1<<16 && len(rows.traits) <= 1<<16 {
		worldRowsPool.Put(rows)
	}
	return w, nil
}

// usageQuery is the query of usage rows (sql: CandUsageAll or CandUsageIn)
// appending them to out.
func usageQuery(sql string, args []any, out *[]usageRow) cQuery {
	return cQuery{sql, args, func(r pgx.Rows) error {
		var u usageRow
		if v, ok := rawBinary(r); ok && len(v[0]) == 8 && len(v[2]) == 8 {
			u.pid, u.rc, u.used = rawInt(v[0]), int32(rawInt(v[1])), rawInt(v[2])
			*out = append(*out, u)
			return nil
		}
		err := r.Scan(&u.pid, &u.rc, &u.used)
		*out = append(*out, u)
		return err
	}}
}

// worldQueries returns the queries reading the static rows of providers,
// traits, aggregates and inventories (sqls, in that order, each with args)
// into rows. Rows are decoded straight from their binary form into flat
// slices, spread over the providers by buildWorld with one allocation per
// kind.
func worldQueries(sqls [4]string, args []any, rows *worldRows) []cQuery {
	provSQL, traitSQL, aggSQL, invSQL := sqls[0], sqls[1], sqls[2], sqls[3]
	rootsArg := args
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
	}
	return qs
}

// worldRows is the static rows read by worldQueries (reused between
// requests, or cached whole by worldCache and then never written again).
type worldRows struct {
	provs  []provRow
	traits []traitRow
	aggs   []aggRow
	invs   []invRow
}

func (r *worldRows) reset() {
	r.provs, r.traits, r.aggs, r.invs = r.provs[:0], r.traits[:0], r.aggs[:0], r.invs[:0]
}

// sortProviders orders the providers by id (buildWorld then reads rows
// without writing them).
func (r *worldRows) sortProviders() {
	byID := func(a, b provRow) int { return cmp.Compare(a.id, b.id) }
	if !slices.IsSortedFunc(r.provs, byID) {
		slices.SortFunc(r.provs, byID)
	}
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

// buildWorld builds the world from the static rows of worldQueries, its
// inventories' usage indexes from ixBase (usageInto fills them). It
// writes rows only to sort the providers when they are not sorted yet
// (see sortProviders).
func buildWorld(rows *worldRows, sharingID int64, ixBase int32) *cWorld {
	w := &cWorld{sharingAnchors: map[int64][]int64{}, invBase: ixBase}
	traits, aggs, invs := rows.traits, rows.aggs, rows.invs
	rows.sortProviders()
	store := make([]cProv, len(rows.provs))
	for i, r := range rows.provs {
		store[i] = cProv{id: r.id, parent: r.parent, root: r.root, uuid: r.uuid}
		appendQuotedUUID(store[i].ut[:0], &store[i].uuid)
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
	ix := ixBase
	for _, p := range w.order {
		for k := range p.inv {
			p.inv[k].ix = ix
			ix++
		}
	}
	w.nInv = ix - ixBase
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
