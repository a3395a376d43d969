package lease

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	nodeapi "github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/topology"
	"github.com/metalloc/metalloc/web"
)

// Bounds and defaults of the lease calendar (GET /v1/ui/leases).
const (
	// MaxLeaseCalendarSteps bounds the columns of one calendar: a week in
	// hours is 168, 90 days in 6-hour cells 360.
	MaxLeaseCalendarSteps = 400
	// DefaultCalendarStep and DefaultCalendarPeriod are the cells and the
	// period of a calendar that does not name them: a week in 6-hour cells.
	DefaultCalendarStep   = 6 * time.Hour
	DefaultCalendarPeriod = 7 * 24 * time.Hour
)

// Calendar is the lease calendar of GET /v1/ui/leases (metalloc's own, for
// the fleet page and `metalloc-manage lease calendar`): one row per
// topology domain (a rack), one cell per step of [After, Until), and in
// each cell the leases holding the domain's nodes during (some of) the
// step and how many nodes are free for the whole of it. It reads the
// blocking rows of lease_nodes (not released: pending, active and error
// leases), as admission does; ended and cancelled leases hold nothing.
type Calendar struct {
	// Now is when the calendar was read (RFC 3339, UTC), for the page's
	// "now" mark.
	Now string `json:"now"`
	// After and Until bound the period (RFC 3339, UTC); Step is a cell's
	// length in seconds; cell i is [After+i*Step, After+(i+1)*Step), the
	// last one cut at Until.
	After string `json:"after"`
	Until string `json:"until"`
	Step  int64  `json:"step"`
	// Level is the topology level the rows are domains of (null without
	// a topology: one row, the whole pool, domain ""); Levels are the
	// topology's level names, coarse to fine.
	Level  *string  `json:"level"`
	Levels []string `json:"levels"`
	// ResourceClass is the class the calendar is limited to (null: all).
	ResourceClass *string `json:"resource_class"`
	// Leases are the leases the cells name, by start time: those holding a
	// node of the rows during the period that the caller may see (as GET
	// /v1/leases lists them); cells count the others as hidden.
	Leases []CalendarLease `json:"leases"`
	// Rows are the domains in natural order ("1/2" before "1/10"), the
	// nodes without a value at the level last (Domain "").
	Rows []CalendarRow `json:"rows"`
}

// CalendarLease is a lease of a Calendar: what identifies it and Nodes,
// how many nodes of the calendar's rows it holds.
type CalendarLease struct {
	UUID      string  `json:"uuid"`
	Name      *string `json:"name"`
	ProjectID string  `json:"project_id"`
	State     string  `json:"state"`
	OnStart   string  `json:"on_start"`
	StartTime string  `json:"start_time"`
	EndTime   string  `json:"end_time"`
	Nodes     int     `json:"nodes"`
}

// CalendarRow is one domain of a Calendar. Total counts its reservable
// nodes (of the class asked for), Maintenance those of them in
// maintenance, Classes them per resource class; a node a lease holds that
// has left the pool since shows in that lease's counts only.
type CalendarRow struct {
	Domain      string         `json:"domain"`
	Total       int            `json:"total"`
	Maintenance int            `json:"maintenance"`
	Classes     map[string]int `json:"classes"`
	Cells       []CalendarCell `json:"cells"`
}

// CalendarCell is one step of a row: Free nodes (reservable, not in
// maintenance, held by no lease at any moment of the step), and the
// leases that hold some of the row's nodes during the step, each with how
// many (Leases; Hidden sums those of leases the caller may not see).
type CalendarCell struct {
	Free   int         `json:"free"`
	Leases []CellLease `json:"leases"`
	Hidden int         `json:"hidden"`
}

// CellLease is a lease in a cell: its index in Calendar.Leases and the
// number of the row's nodes it holds during the cell.
type CellLease struct {
	Lease int `json:"lease"`
	Nodes int `json:"nodes"`
}

// CalendarQuery is what a calendar is of: [After, Until) in steps of Step
// (at most MaxLeaseCalendarSteps), rows of the topology level LevelIndex
// (-1: the whole pool; Sources: the sources of the levels down to it, as
// Reservation's), nodes of ResourceClass (nil: all). Project is the
// project whose leases the caller may see (nil: every lease); HideAll
// hides every lease.
type CalendarQuery struct {
	After, Until  time.Time
	Step          time.Duration
	Level         string
	LevelIndex    int
	Levels        []string
	Sources       []string
	ResourceClass *string
	Project       *string
	HideAll       bool
}

// Calendar reads the lease calendar q asks for: two statements in one
// read-only transaction (CalendarNodes, CalendarLeases), then one pass
// over the nodes' rows in Go.
func (s *Store) Calendar(ctx context.Context, q CalendarQuery, now time.Time) (*Calendar, error) {
	steps := calendarSteps(q.After, q.Until, q.Step)
	var rows []CalendarNodesRow
	var leases []Lease
	err := s.inReadTx(ctx, func(qs *Queries, _ pgx.Tx) error {
		var err error
		if rows, err = qs.CalendarNodes(ctx, CalendarNodesParams{FromTime: q.After, UntilTime: q.Until,
			ResourceClass: q.ResourceClass, Sources: nonNil(q.Sources)}); err != nil {
			return err
		}
		var ids []int64
		seen := map[int64]bool{}
		for _, r := range rows {
			for _, id := range r.LeaseIds {
				if !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
			}
		}
		if len(ids) > 0 {
			leases, err = qs.CalendarLeases(ctx, ids)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	cal := buildCalendar(q, rows, leases, steps)
	cal.Now = now.UTC().Truncate(time.Second).Format(timeFormat)
	return cal, nil
}

// calendarSteps is the number of cells of [after, until) in steps of
// step (the last one may be shorter).
func calendarSteps(after, until time.Time, step time.Duration) int {
	return int((until.Sub(after) + step - 1) / step)
}

// buildCalendar lays rows (CalendarNodes') and leases (CalendarLeases')
// out as q's calendar of steps cells.
func buildCalendar(q CalendarQuery, rows []CalendarNodesRow, leases []Lease, steps int) *Calendar {
	cal := &Calendar{
		After: q.After.UTC().Format(timeFormat), Until: q.Until.UTC().Format(timeFormat),
		Step: int64(q.Step / time.Second), Levels: nonNil(q.Levels), ResourceClass: q.ResourceClass,
		Leases: []CalendarLease{}, Rows: []CalendarRow{},
	}
	if q.LevelIndex >= 0 {
		level := q.Level
		cal.Level = &level
	}
	// Leases: the visible ones get an index (by start time, as read);
	// the others are -1 (hidden).
	index := make(map[int64]int, len(leases))
	for _, l := range leases {
		if q.HideAll || (q.Project != nil && l.ProjectID != *q.Project) {
			index[l.ID] = -1
			continue
		}
		index[l.ID] = len(cal.Leases)
		cal.Leases = append(cal.Leases, CalendarLease{
			UUID: l.Uuid.String(), Name: l.Name, ProjectID: l.ProjectID, State: l.State, OnStart: l.OnStart,
			StartTime: l.StartTime.UTC().Format(timeFormat), EndTime: l.EndTime.UTC().Format(timeFormat),
		})
	}
	after, step := q.After.Unix(), int64(q.Step/time.Second)
	// cellRange is the cells [lo, hi) that [from, to) overlaps.
	cellRange := func(from, to int64) (int, int) {
		lo, hi := 0, steps
		if from > after {
			lo = int((from - after) / step)
		}
		if end := after + int64(steps)*step; to < end {
			hi = int((to - after + step - 1) / step)
		}
		return lo, min(hi, steps)
	}
	type domainRow struct {
		row  CalendarRow
		path []string
		busy []int // difference array: nodes held at some moment of the cell
	}
	// holding is the nodes a lease holds in a row over cells [lo, hi).
	type holding struct {
		row, lease, lo, hi int
	}
	byDomain := map[string]int{}
	var out []*domainRow
	held := map[holding]int{}
	for _, r := range rows {
		name, in := domainKey(r.Path, q.LevelIndex)
		if !in {
			name = ""
		}
		k, seen := byDomain[name]
		if !seen {
			k = len(out)
			byDomain[name] = k
			var path []string
			if in && name != "" {
				path = r.Path[:q.LevelIndex+1]
			}
			out = append(out, &domainRow{row: CalendarRow{Domain: name, Classes: map[string]int{}}, path: path,
				busy: make([]int, steps+1)})
		}
		d := out[k]
		if r.Reservable {
			d.row.Total++
			d.row.Classes[r.ResourceClass]++
			if r.Maintenance {
				d.row.Maintenance++
			}
		}
		// A node in maintenance is never free (nor counted busy by its
		// rows); one that left the pool is not in Total.
		eligible := r.Reservable && !r.Maintenance
		if r.Reservable && r.Maintenance {
			d.busy[0]++
			d.busy[steps]--
		}
		// The node's rows by start; the cells it is held in are counted
		// once (next: the first cell not yet counted).
		order := make([]int, 0, len(r.LeaseIds))
		for i := range r.LeaseIds {
			if i < len(r.BusyFrom) && i < len(r.BusyTo) {
				order = append(order, i)
			}
		}
		slices.SortFunc(order, func(a, b int) int { return r.BusyFrom[a].Compare(r.BusyFrom[b]) })
		next := 0
		for _, i := range order {
			lo, hi := cellRange(r.BusyFrom[i].Unix(), r.BusyTo[i].Unix())
			if hi <= lo {
				continue
			}
			li, known := index[r.LeaseIds[i]]
			if !known {
				li = -1 // deleted between the two reads: hidden
			}
			held[holding{k, li, lo, hi}]++
			if li >= 0 {
				cal.Leases[li].Nodes++
			}
			if lo = max(lo, next); eligible && hi > lo {
				d.busy[lo]++
				d.busy[hi]--
				next = hi
			}
		}
	}
	for _, d := range out {
		d.row.Cells = make([]CalendarCell, steps)
		busy := 0
		for s := range steps {
			busy += d.busy[s]
			d.row.Cells[s] = CalendarCell{Free: max(0, d.row.Total-busy), Leases: []CellLease{}}
		}
	}
	for h, n := range held {
		cells := out[h.row].row.Cells
		for s := h.lo; s < h.hi; s++ {
			if h.lease < 0 {
				cells[s].Hidden += n
			} else {
				cells[s].Leases = append(cells[s].Leases, CellLease{Lease: h.lease, Nodes: n})
			}
		}
	}
	for _, d := range out {
		for s := range d.row.Cells {
			c := &d.row.Cells[s]
			slices.SortFunc(c.Leases, func(a, b CellLease) int { return cmp.Compare(a.Lease, b.Lease) })
			c.Leases = mergeCellLeases(c.Leases)
		}
	}
	slices.SortFunc(out, func(a, b *domainRow) int { return comparePaths(a.path, b.path) })
	for _, d := range out {
		cal.Rows = append(cal.Rows, d.row)
	}
	return cal
}

// mergeCellLeases sums the entries of one lease (sorted by lease): a
// lease whose nodes' rows differ (some of them extended) is one entry.
func mergeCellLeases(ls []CellLease) []CellLease {
	out := ls[:0]
	for _, l := range ls {
		if n := len(out); n > 0 && out[n-1].Lease == l.Lease {
			out[n-1].Nodes += l.Nodes
			continue
		}
		out = append(out, l)
	}
	return out
}

// comparePaths orders domains by their path, value by value in natural
// order (node.NaturalCompare: "2" before "10"); no path (the nodes in no
// domain of the level) last.
func comparePaths(a, b []string) int {
	if (a == nil) != (b == nil) {
		if a == nil {
			return 1
		}
		return -1
	}
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := nodeapi.NaturalCompare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

// uiCalendar is GET /v1/ui/leases, the lease calendar (Calendar; the
// fleet page's, and `metalloc-manage lease calendar`'s). Query parameters,
// each optional: step (seconds or a Go duration, default 6h), after (RFC
// 3339 or "now", default now rounded down to a multiple of step since
// the Unix epoch: the current 6-hour block in UTC, or today for 24h),
// until (default after + 7 days; at most MaxLeaseCalendarSteps steps),
// level (a topology level name, default the finest level), resource_class.
// Any authenticated caller may read it, as the availability: the counts
// are for everyone, the leases named only to those allowed to list them
// (GET /v1/leases: every lease with baremetal:allocation:list_all, else
// its project's); the others are counted as hidden.
func (h *Handler) uiCalendar(c echo.Context) error {
	ctx := c.Request().Context()
	qp := c.QueryParam
	step, err := parseSeconds("step", qp("step"), DefaultCalendarStep)
	if err != nil {
		return err
	}
	now := h.opts.Now().UTC()
	q := CalendarQuery{Step: step, LevelIndex: -1}
	if s := qp("after"); s != "" && s != "now" {
		if q.After, err = parseTime("after", s); err != nil {
			return err
		}
	} else {
		sec := int64(step / time.Second)
		q.After = fromUnix(now.Unix() - ((now.Unix()%sec)+sec)%sec)
	}
	q.Until = q.After.Add(DefaultCalendarPeriod)
	if s := qp("until"); s != "" {
		if q.Until, err = parseTime("until", s); err != nil {
			return err
		}
		if !q.Until.After(q.After) {
			return web.BadRequest("Invalid until %s: not after after (%s)", q.Until.Format(timeFormat), q.After.Format(timeFormat))
		}
	}
	if steps := calendarSteps(q.After, q.Until, step); steps > MaxLeaseCalendarSteps {
		return web.BadRequest("Too many steps: %d from %s to %s in steps of %s, at most %d: take a longer step",
			steps, q.After.Format(timeFormat), q.Until.Format(timeFormat), step, MaxLeaseCalendarSteps)
	}
	if s := qp("resource_class"); s != "" {
		q.ResourceClass = &s
	}
	levels, err := topology.Load(ctx, h.pool)
	if err != nil {
		return err
	}
	for _, l := range levels {
		q.Levels = append(q.Levels, l.Name)
	}
	if name := qp("level"); name != "" {
		if q.LevelIndex, err = topology.LevelIndex(levels, name); err != nil {
			return web.BadRequest("Invalid level: %v", err)
		}
		q.Level = name
	} else if len(levels) > 0 {
		q.LevelIndex, q.Level = len(levels)-1, levels[len(levels)-1].Name
	}
	q.Sources = levelSources(levels, q.LevelIndex)
	if project, err := h.policy.ListScope(c, nil); err != nil {
		q.HideAll = true // may not list leases: counts only
	} else {
		q.Project = project
	}
	cal, err := h.store.Calendar(ctx, q, now)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, cal)
}
