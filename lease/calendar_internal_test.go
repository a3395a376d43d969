package lease

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestBuildCalendar lays out hand-made rows without a database: leases
// of another project are counted as hidden, a node held by two leases in
// one cell (one ends, the next starts) is busy once, a node in
// maintenance is never free, one that left the pool shows only in its
// lease's count, a node with no value at the level is in the row "" (last),
// and racks sort naturally.
func TestBuildCalendar(t *testing.T) {
	t0 := time.Date(2030, 1, 6, 0, 0, 0, 0, time.UTC)
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	p1, p2 := "p1", "p2"
	mine := Lease{ID: 1, Uuid: uuid.New(), ProjectID: p1, State: StatePending, OnStart: OnStartAllocate, StartTime: h(0), EndTime: h(9)}
	next := Lease{ID: 2, Uuid: uuid.New(), ProjectID: p1, State: StatePending, OnStart: OnStartLessee, StartTime: h(9), EndTime: h(24)}
	theirs := Lease{ID: 3, Uuid: uuid.New(), ProjectID: p2, State: StateActive, OnStart: OnStartAllocate, StartTime: h(0), EndTime: h(6)}
	rows := []CalendarNodesRow{
		// rack 1/10: node held by mine then next (cell [6, 12) has both).
		{ID: 1, ResourceClass: "gpu", Reservable: true, Path: []string{"1", "10"},
			LeaseIds: []int64{2, 1}, BusyFrom: []time.Time{h(9), h(0)}, BusyTo: []time.Time{h(24), h(9)}},
		{ID: 2, ResourceClass: "gpu", Reservable: true, Path: []string{"1", "10"},
			LeaseIds: []int64{3}, BusyFrom: []time.Time{h(0)}, BusyTo: []time.Time{h(6)}},
		// rack 1/9: one in maintenance, one left the pool but held by mine.
		{ID: 3, ResourceClass: "gold", Reservable: true, Maintenance: true, Path: []string{"1", "9"}},
		{ID: 4, ResourceClass: "gpu", Reservable: false, Path: []string{"1", "9"},
			LeaseIds: []int64{1}, BusyFrom: []time.Time{h(0)}, BusyTo: []time.Time{h(9)}},
		// no rack
		{ID: 5, ResourceClass: "gpu", Reservable: true, Path: []string{"1", ""}},
	}
	q := CalendarQuery{After: h(0), Until: h(24), Step: 6 * time.Hour, Level: "rack", LevelIndex: 1,
		Levels: []string{"row", "rack"}, Project: &p1}
	cal := buildCalendar(q, rows, []Lease{mine, theirs, next}, calendarSteps(q.After, q.Until, q.Step))

	require.Len(t, cal.Leases, 2, "p2's lease is hidden")
	require.Equal(t, mine.Uuid.String(), cal.Leases[0].UUID)
	require.Equal(t, 2, cal.Leases[0].Nodes)
	require.Equal(t, next.Uuid.String(), cal.Leases[1].UUID)
	require.Equal(t, 1, cal.Leases[1].Nodes)
	var domains []string
	for _, r := range cal.Rows {
		domains = append(domains, r.Domain)
	}
	require.Equal(t, []string{"1/9", "1/10", ""}, domains)

	r9, r10, none := cal.Rows[0], cal.Rows[1], cal.Rows[2]
	require.Equal(t, 1, r9.Total)
	require.Equal(t, 1, r9.Maintenance)
	require.Equal(t, map[string]int{"gold": 1}, r9.Classes)
	for s, c := range r9.Cells {
		require.Zero(t, c.Free, "cell %d: the node in maintenance is never free", s)
	}
	require.Equal(t, []CellLease{{Lease: 0, Nodes: 1}}, r9.Cells[0].Leases)
	require.Equal(t, []CellLease{{Lease: 0, Nodes: 1}}, r9.Cells[1].Leases)
	require.Empty(t, r9.Cells[2].Leases)

	require.Equal(t, 2, r10.Total)
	require.Equal(t, []CalendarCell{
		{Free: 0, Leases: []CellLease{{0, 1}}, Hidden: 1},
		{Free: 1, Leases: []CellLease{{0, 1}, {1, 1}}},
		{Free: 1, Leases: []CellLease{{1, 1}}},
		{Free: 1, Leases: []CellLease{{1, 1}}},
	}, r10.Cells)
	require.Equal(t, []CalendarCell{{Free: 1, Leases: []CellLease{}}, {Free: 1, Leases: []CellLease{}},
		{Free: 1, Leases: []CellLease{}}, {Free: 1, Leases: []CellLease{}}}, none.Cells)

	// Every lease hidden (a caller who may not list leases): counts only.
	q.Project, q.HideAll = nil, true
	cal = buildCalendar(q, rows, []Lease{mine, theirs, next}, 4)
	require.Empty(t, cal.Leases)
	require.Equal(t, 2, cal.Rows[1].Cells[0].Hidden)
	require.Equal(t, 2, cal.Rows[1].Cells[1].Hidden)

	// Without a level: one row, "" (p1's leases named again).
	q.LevelIndex, q.Level, q.HideAll, q.Project = -1, "", false, &p1
	cal = buildCalendar(q, rows, []Lease{mine, theirs, next}, 4)
	require.Nil(t, cal.Level)
	require.Len(t, cal.Rows, 1)
	require.Equal(t, 4, cal.Rows[0].Total)
	require.Equal(t, CalendarCell{Free: 1, Leases: []CellLease{{0, 2}}, Hidden: 1}, cal.Rows[0].Cells[0])
}
