package db

import (
	"fmt"
	"strings"
)

// Page describes one page of a keyset-paginated listing ordered by
// (SortColumn, id): the column to sort by (a trusted identifier from the
// caller's whitelist, never user text), the direction, and the marker row's
// sort value and id when continuing after a marker.
type Page struct {
	SortColumn string
	Desc       bool
	// HasMarker is true when the listing continues after a marker row whose
	// sort value is MarkerValue (nil for SQL NULL) and whose id is MarkerID.
	HasMarker   bool
	MarkerValue any
	MarkerID    int64
	Limit       int
}

// Where is a conjunction of SQL conditions with positional arguments, built
// up by list endpoints from their filters.
type Where struct {
	conds []string
	Args  []any
}

// Add appends a condition; each "?" in cond is replaced by the next
// positional parameter bound to the matching arg.
func (w *Where) Add(cond string, args ...any) {
	for _, a := range args {
		w.Args = append(w.Args, a)
		cond = strings.Replace(cond, "?", fmt.Sprintf("$%d", len(w.Args)), 1)
	}
	w.conds = append(w.conds, cond)
}

// SQL returns "WHERE c1 AND c2 ..." or "" when there are no conditions.
func (w *Where) SQL() string {
	if len(w.conds) == 0 {
		return ""
	}
	return "WHERE " + strings.Join(w.conds, " AND ")
}

// Apply adds the keyset condition of p to w (rows strictly after the marker in
// (sort value, id) order, with PostgreSQL's NULL placement: last ascending,
// first descending) and returns the ORDER BY ... LIMIT tail. idCol and the
// sort column are qualified column expressions such as "a.id".
func (p Page) Apply(w *Where, idCol string) string {
	col := p.SortColumn
	if p.HasMarker {
		switch {
		case col == idCol:
			if p.Desc {
				w.Add(idCol+" < ?", p.MarkerID)
			} else {
				w.Add(idCol+" > ?", p.MarkerID)
			}
		case p.MarkerValue == nil && !p.Desc:
			w.Add(fmt.Sprintf("(%s IS NULL AND %s > ?)", col, idCol), p.MarkerID)
		case p.MarkerValue == nil && p.Desc:
			w.Add(fmt.Sprintf("((%s IS NULL AND %s < ?) OR %s IS NOT NULL)", col, idCol, col), p.MarkerID)
		case !p.Desc:
			w.Add(fmt.Sprintf("(%s > ? OR (%s = ? AND %s > ?) OR %s IS NULL)", col, col, idCol, col),
				p.MarkerValue, p.MarkerValue, p.MarkerID)
		default:
			w.Add(fmt.Sprintf("(%s < ? OR (%s = ? AND %s < ?))", col, col, idCol),
				p.MarkerValue, p.MarkerValue, p.MarkerID)
		}
	}
	dir := "ASC"
	if p.Desc {
		dir = "DESC"
	}
	order := fmt.Sprintf(" ORDER BY %s %s", col, dir)
	if col != idCol {
		order += fmt.Sprintf(", %s %s", idCol, dir)
	}
	if p.Limit > 0 {
		order += fmt.Sprintf(" LIMIT %d", p.Limit)
	}
	return order
}
