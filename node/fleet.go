package node

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// The operator page's bounds: a summary carries its selection's nodes
// only when there are at most FleetMaxNodes of them, and every rack only
// when there are at most FleetMaxRacks (else its rows, and the racks of
// one row when the page zooms into it). So a summary is at most about
// FleetMaxNodes nodes and FleetMaxRacks racks, whatever the fleet's size.
const (
	FleetMaxNodes = 20_000
	FleetMaxRacks = 10_000
)

// Fleet is the fleet summary of GET /v1/ui/fleet, the operator page's one
// read of the fleet (metalloc's own, no Ironic counterpart): counts per
// topology row and rack, and the nodes of the selection (the whole fleet,
// one row or one rack) when there are at most FleetMaxNodes of them. Nodes
// are columns (parallel arrays, one entry per node in id order) whose
// repeated strings are indexes into the dictionaries.
type Fleet struct {
	// GeneratedAt is when the counts were read (RFC 3339, UTC). Counts
	// are shared by concurrent and closely following requests (see
	// Store.Fleet), so this may be a little before the request.
	GeneratedAt time.Time `json:"generated_at"`
	// States are the node categories (metalloc_node_category): available,
	// allocated (holds an allocation or instance, or is active),
	// maintenance, manageable (enroll, manageable and the states between)
	// and error (error and the "... failed" states). Counts per state and
	// Nodes.State index them.
	States []string `json:"states"`
	// Classes, Owners and Traits are the dictionaries of resource classes,
	// owners ("" for none) and traits of every node the caller sees,
	// sorted.
	Classes []string `json:"classes"`
	Owners  []string `json:"owners"`
	Traits  []string `json:"traits"`
	// Total counts the nodes the caller sees, Matched those of them the
	// filter selects (Total without a filter).
	Total   int `json:"total"`
	Matched int `json:"matched"`
	// Rows are the topology rows (extra.row, "" when absent) in natural
	// order, with their racks' counts: the first FleetMaxRacks of
	// RowCount.
	Rows     []FleetRow `json:"rows"`
	RowCount int        `json:"row_count"`
	// Racks are the racks (extra.row and extra.rack) in natural order:
	// every rack, or with Row set the racks of that row; null when there
	// are more than FleetMaxRacks.
	Racks []FleetRack `json:"racks"`
	// Row and Rack are the selection the request asked for (null: every
	// row, every rack of the row).
	Row  *string `json:"row"`
	Rack *string `json:"rack"`
	// SelectionTotal counts the selection's nodes (Total without one).
	SelectionTotal int `json:"selection_total"`
	// ClassSummary is free/total per resource class, in Classes' order.
	ClassSummary []FreeTotal `json:"class_summary"`
	// Nodes are the selection's nodes, as columns; null when there are
	// more than NodeLimit.
	Nodes *FleetNodes `json:"nodes"`
	// NodeLimit and RackLimit are FleetMaxNodes and FleetMaxRacks.
	NodeLimit int `json:"node_limit"`
	RackLimit int `json:"rack_limit"`
}

// FleetRow is one row of Fleet.Rows: its rack count, its free and total
// nodes, and States, its nodes the filter selects per state (Fleet.States'
// order).
type FleetRow struct {
	Row   string `json:"row"`
	Racks int    `json:"racks"`
	FreeTotal
	States []int `json:"states"`
}

// FleetRack is one rack of Fleet.Racks with its free and total node counts
// and States, its nodes the filter selects per state.
type FleetRack struct {
	Row  string `json:"row"`
	Rack string `json:"rack"`
	FreeTotal
	States []int `json:"states"`
}

// FreeTotal counts nodes: Free are those a conductor could reserve now
// (metalloc_node_free: available, not in maintenance, powered, no instance,
// no allocation), Total all of them.
type FreeTotal struct {
	Name  string `json:"name,omitempty"`
	Free  int    `json:"free"`
	Total int    `json:"total"`
}

// FleetNodes are Fleet's node columns; entry i of each describes node i.
type FleetNodes struct {
	UUID   []string `json:"uuid"`
	Name   []string `json:"name"`
	State  []int    `json:"state"`  // index into Fleet.States
	Class  []int    `json:"class"`  // index into Fleet.Classes
	Owner  []int    `json:"owner"`  // index into Fleet.Owners
	Rack   []int    `json:"rack"`   // index into Fleet.Racks
	Traits [][]int  `json:"traits"` // indexes into Fleet.Traits
	// ProvisionState is Ironic's provision_state, for the page's tooltip.
	ProvisionState []string `json:"provision_state"`
}

// fleetStates are Fleet.States, in metalloc_node_category's order.
var fleetStates = []string{"available", "allocated", "maintenance", "manageable", "error"}

// FleetQuery is what a fleet summary is of: the nodes Project owns or
// leases (nil: every node), counted per state for those the filter
// selects (ResourceClass, Owner, Trait: nil ignores one; "" is a node
// without class or owner), with the nodes of the selection Row (nil: the
// whole fleet) and Rack (nil: the whole row).
type FleetQuery struct {
	Project                     *string
	ResourceClass, Owner, Trait *string
	Row, Rack                   *string
}

// Fleet reads the fleet summary q asks for. The counts take one pass over
// the nodes (about a second at 1,000,000): concurrent requests for the
// same counts share one pass, and one finished less than four times its
// duration ago is reused, so the page's viewers cost at most a fifth of a
// core per filter however many they are. The selection's nodes are read
// afresh (at most FleetMaxNodes).
func (s *Store) Fleet(ctx context.Context, q FleetQuery) (*Fleet, error) {
	c, err := s.fleet.get(ctx, q, s.readTally)
	if err != nil {
		return nil, err
	}
	f := &Fleet{
		GeneratedAt: c.at, States: fleetStates, Classes: c.classes, Owners: c.owners, Traits: c.traits,
		Total: c.total, Matched: c.matched, Rows: c.rows[:min(len(c.rows), FleetMaxRacks)], RowCount: len(c.rows),
		Row: q.Row, Rack: q.Rack, ClassSummary: c.classSummary, NodeLimit: FleetMaxNodes, RackLimit: FleetMaxRacks,
	}
	switch {
	case q.Row == nil:
		f.SelectionTotal = c.total
		if len(c.racks) <= FleetMaxRacks {
			f.Racks = c.racks
			if f.Racks == nil {
				f.Racks = []FleetRack{}
			}
		}
	default:
		f.Racks = []FleetRack{}
		inRow := 0
		for _, r := range c.racks {
			if r.Row != *q.Row {
				continue
			}
			if inRow++; inRow <= FleetMaxRacks {
				f.Racks = append(f.Racks, r)
			}
			if q.Rack == nil || r.Rack == *q.Rack {
				f.SelectionTotal += r.Total
			}
		}
		if inRow > FleetMaxRacks && q.Rack == nil {
			return f, nil // some of the row's nodes would be in racks not listed
		}
	}
	if f.SelectionTotal > FleetMaxNodes || f.Racks == nil {
		return f, nil
	}
	var rows []FleetNodesRow
	if q.Row == nil {
		rows, err = s.q.FleetNodes(ctx, FleetNodesParams{Project: q.Project, MaxRows: FleetMaxNodes})
	} else {
		var in []FleetNodesInRow
		in, err = s.q.FleetNodesIn(ctx, FleetNodesInParams{Row: *q.Row, Rack: q.Rack, Project: q.Project, MaxRows: FleetMaxNodes})
		rows = make([]FleetNodesRow, len(in))
		for i, r := range in {
			rows[i] = FleetNodesRow(r)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the fleet's nodes: %w", err)
	}
	f.Nodes = fleetColumns(f, rows)
	return f, nil
}

// fleetColumns turns rows into f's node columns (a node of a class, owner,
// trait or rack read after the counts gets index -1).
func fleetColumns(f *Fleet, rows []FleetNodesRow) *FleetNodes {
	index := func(names []string) map[string]int {
		m := make(map[string]int, len(names))
		for i, n := range names {
			m[n] = i
		}
		return m
	}
	lookup := func(m map[string]int, k string) int {
		if i, ok := m[k]; ok {
			return i
		}
		return -1
	}
	type rackKey struct{ row, rack string }
	racks := make(map[rackKey]int, len(f.Racks))
	for i, r := range f.Racks {
		racks[rackKey{r.Row, r.Rack}] = i
	}
	classes, owners, traits := index(f.Classes), index(f.Owners), index(f.Traits)
	n := len(rows)
	out := &FleetNodes{
		UUID: make([]string, n), Name: make([]string, n), State: make([]int, n), Class: make([]int, n),
		Owner: make([]int, n), Rack: make([]int, n), Traits: make([][]int, n), ProvisionState: make([]string, n),
	}
	for i, r := range rows {
		out.UUID[i], out.Name[i], out.State[i] = r.Uuid.String(), r.Name, int(r.Category)
		out.Class[i], out.Owner[i] = lookup(classes, r.ResourceClass), lookup(owners, r.Owner)
		rk, ok := racks[rackKey{r.Row, r.Rack}]
		if !ok {
			rk = -1
		}
		out.Rack[i], out.ProvisionState[i] = rk, r.ProvisionState
		ts := make([]int, len(r.Traits))
		for j, t := range r.Traits {
			ts[j] = lookup(traits, t)
		}
		out.Traits[i] = ts
	}
	return out
}

// fleetTally are the counts of one FleetQuery (its selection aside), as
// the cache keeps them.
type fleetTally struct {
	at              time.Time
	classes, owners []string
	traits          []string
	total, matched  int
	rows            []FleetRow
	racks           []FleetRack
	classSummary    []FreeTotal
}

// fleetSettings are the counting transaction's: JIT compilation off (at a
// million nodes the planner's estimate passes jit_above_cost, and
// compiling cost 3 s more than the pass), and the memory for hashing the
// groups (about 20 MB per worker for 100,000 row, rack and class groups;
// with the default 4 MB the planner sorts a million rows on disk instead,
// twice as slow).
const fleetSettings = `SELECT set_config('jit', 'off', true), set_config('work_mem', '64MB', true)`

// readTally reads the counts of q in one transaction with fleetSettings.
func (s *Store) readTally(ctx context.Context, q FleetQuery) (*fleetTally, error) {
	at := s.now().UTC()
	var rows []FleetCountsRow
	var traits, owners []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fleetSettings); err != nil {
			return err
		}
		qt := s.q.WithTx(tx)
		var err error
		if rows, err = qt.FleetCounts(ctx, FleetCountsParams{
			ResourceClass: q.ResourceClass, Owner: q.Owner, Trait: q.Trait, Project: q.Project,
		}); err != nil {
			return err
		}
		if q.Project == nil {
			if traits, err = qt.FleetTraits(ctx); err != nil {
				return err
			}
			owners, err = qt.FleetOwners(ctx)
			return err
		}
		if traits, err = qt.FleetProjectTraits(ctx, q.Project); err != nil {
			return err
		}
		owners, err = qt.FleetProjectOwners(ctx, q.Project)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("counting the fleet: %w", err)
	}
	return buildTally(rows, traits, owners, at), nil
}

// buildTally sums rows (one per row, rack and class) into racks, rows and
// classes; owners ("" added when a node has none) and traits are the
// dictionaries.
func buildTally(rows []FleetCountsRow, traits, owners []string, at time.Time) *fleetTally {
	c := &fleetTally{at: at, traits: traits, owners: owners}
	if c.traits == nil {
		c.traits = []string{}
	}
	type rackKey struct{ row, rack string }
	racks, rowsOf := map[rackKey]*FleetRack{}, map[string]*FleetRow{}
	classes, noOwner := map[string]*FreeTotal{}, false
	for _, r := range rows {
		states := []int{int(r.MatchedAvailable), int(r.MatchedAllocated), int(r.MatchedMaintenance),
			int(r.MatchedManageable), int(r.MatchedError)}
		rk := racks[rackKey{r.Row, r.Rack}]
		if rk == nil {
			rk = &FleetRack{Row: r.Row, Rack: r.Rack, States: make([]int, len(fleetStates))}
			racks[rackKey{r.Row, r.Rack}] = rk
		}
		row := rowsOf[r.Row]
		if row == nil {
			row = &FleetRow{Row: r.Row, States: make([]int, len(fleetStates))}
			rowsOf[r.Row] = row
		}
		class := classes[r.ResourceClass]
		if class == nil {
			class = &FreeTotal{Name: r.ResourceClass}
			classes[r.ResourceClass] = class
		}
		noOwner = noOwner || r.NoOwner > 0
		for _, ft := range []*FreeTotal{&rk.FreeTotal, &row.FreeTotal, class} {
			ft.Free += int(r.Free)
			ft.Total += int(r.Total)
		}
		for k, n := range states {
			rk.States[k] += n
			row.States[k] += n
			c.matched += n
		}
		c.total += int(r.Total)
	}
	c.racks = make([]FleetRack, 0, len(racks))
	for _, r := range racks {
		c.racks = append(c.racks, *r)
		rowsOf[r.Row].Racks++
	}
	slices.SortFunc(c.racks, func(a, b FleetRack) int {
		return cmp.Or(NaturalCompare(a.Row, b.Row), NaturalCompare(a.Rack, b.Rack))
	})
	c.rows = make([]FleetRow, 0, len(rowsOf))
	for _, r := range rowsOf {
		c.rows = append(c.rows, *r)
	}
	slices.SortFunc(c.rows, func(a, b FleetRow) int { return NaturalCompare(a.Row, b.Row) })
	for name := range classes {
		c.classes = append(c.classes, name)
	}
	slices.Sort(c.classes)
	c.classSummary = make([]FreeTotal, len(c.classes))
	for i, name := range c.classes {
		c.classSummary[i] = *classes[name]
	}
	if noOwner {
		c.owners = append([]string{""}, c.owners...)
	}
	if c.classes == nil {
		c.classes = []string{}
	}
	if c.owners == nil {
		c.owners = []string{}
	}
	return c
}

// NaturalCompare orders numbers numerically ("2" before "10"), numbers
// before other strings, "" last.
func NaturalCompare(a, b string) int {
	if (a == "") != (b == "") {
		if a == "" {
			return 1
		}
		return -1
	}
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	switch {
	case errA == nil && errB == nil:
		return cmp.Compare(x, y)
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// fleet serves GET /v1/ui/fleet: the Fleet summary, access-checked as GET
// /v1/nodes (ListScope: a project-scoped caller without
// baremetal:node:list_all gets its own nodes, one without a project 403).
// Query parameters, each optional: resource_class, owner and trait filter
// the per-state counts ("" is a node without class or owner); row selects
// a topology row ("" the nodes without one) and rack one rack of it (rack
// needs row). A value that is not UTF-8 or holds a NUL byte is 400. The
// body is gzip-compressed when the client accepts it.
func (h *Handler) fleet(c echo.Context) error {
	project, err := ListScope(c, h.opts.Rules, "node", nil)
	if err != nil {
		return err
	}
	q := FleetQuery{Project: project}
	params := c.QueryParams()
	for _, p := range []struct {
		name string
		dst  **string
	}{{"resource_class", &q.ResourceClass}, {"owner", &q.Owner}, {"trait", &q.Trait}, {"row", &q.Row}, {"rack", &q.Rack}} {
		if !params.Has(p.name) {
			continue
		}
		v := params.Get(p.name)
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return web.BadRequest("Invalid %s: not a valid UTF-8 string without NUL bytes", p.name)
		}
		*p.dst = &v
	}
	if q.Rack != nil && q.Row == nil {
		return web.BadRequest("The rack parameter needs the row parameter (racks are named within their row)")
	}
	f, err := h.store.Fleet(c.Request().Context(), q)
	if err != nil {
		return apiError(err, "")
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, f)
}

// fleetCache shares fleet counts between requests (Store.Fleet): one
// computation per key at a time, its result reused while younger than
// four times what it took. It holds at most fleetCacheSize keys (a
// project and a filter each), dropping the oldest. The zero value is
// ready.
type fleetCache struct {
	mu      sync.Mutex
	entries map[string]*fleetEntry
}

const fleetCacheSize = 32

// fleetEntry is one key's latest computation; done is closed once c and
// err are set.
type fleetEntry struct {
	done    chan struct{}
	c       *fleetTally
	err     error
	expires time.Time
}

// get returns q's counts: a fresh enough entry's, the one being computed's,
// or compute's (run without the request's cancellation, so that the
// requests sharing it are not failed by the first one leaving, within a
// minute).
func (fc *fleetCache) get(ctx context.Context, q FleetQuery,
	compute func(context.Context, FleetQuery) (*fleetTally, error)) (*fleetTally, error) {
	key := fleetKey(q)
	fc.mu.Lock()
	e := fc.entries[key]
	if e != nil {
		select {
		case <-e.done:
			if e.err != nil || time.Now().After(e.expires) {
				e = nil
			}
		default: // being computed
		}
	}
	if e == nil {
		e = &fleetEntry{done: make(chan struct{})}
		if fc.entries == nil {
			fc.entries = map[string]*fleetEntry{}
		}
		fc.evict()
		fc.entries[key] = e
		go func() {
			start := time.Now()
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			c, err := compute(cctx, q)
			fc.mu.Lock()
			e.c, e.err, e.expires = c, err, time.Now().Add(4*time.Since(start))
			fc.mu.Unlock()
			close(e.done)
		}()
	}
	fc.mu.Unlock()
	select {
	case <-e.done:
		return e.c, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// evict drops finished entries past their time, then the oldest finished
// ones while the cache is full (fc.mu held).
func (fc *fleetCache) evict() {
	for len(fc.entries) >= fleetCacheSize {
		var oldest string
		var at time.Time
		for k, e := range fc.entries {
			select {
			case <-e.done:
				if oldest == "" || e.expires.Before(at) {
					oldest, at = k, e.expires
				}
			default:
			}
		}
		if oldest == "" {
			return // every entry is being computed: let the map grow
		}
		delete(fc.entries, oldest)
	}
}

// fleetKey identifies q's counts (the selection does not change them).
func fleetKey(q FleetQuery) string {
	part := func(p *string) string {
		if p == nil {
			return "-"
		}
		return strconv.Quote(*p)
	}
	return strings.Join([]string{part(q.Project), part(q.ResourceClass), part(q.Owner), part(q.Trait)}, " ")
}
