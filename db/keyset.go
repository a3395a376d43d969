package db

import (
	"fmt"
	"strconv"
	"strings"
)

// Where builds the WHERE clause of a list query whose filters vary per
// request: conditions are SQL fragments written by the caller (column names
// from a whitelist, never user text) and every value goes through Arg as a
// bind parameter.
type Where struct {
	conds []string
	// Args are the bind parameters, in $n order.
	Args []any
}

// Arg binds v and returns its placeholder ("$3").
func (w *Where) Arg(v any) string {
	w.Args = append(w.Args, v)
	return "$" + strconv.Itoa(len(w.Args))
}

// Add appends a condition.
func (w *Where) Add(cond string) { w.conds = append(w.conds, cond) }

// Eq adds "col = value" when v is not nil.
func Eq[T any](w *Where, col string, v *T) {
	if v != nil {
		w.Add(col + " = " + w.Arg(*v))
	}
}

// SQL returns " WHERE c1 AND c2 ..." or "" when there are no conditions.
func (w *Where) SQL() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// After adds keyset pagination: only rows strictly after the marker row in
// (sort, id) order, with PostgreSQL's NULL placement (last ascending, first
// descending). sort is the sort expression over the listed rows ("" sorts by
// id alone); markerSort is the same expression for the marker row, typically
// a scalar subquery on markerID.
func (w *Where) After(sort, markerSort, idCol string, markerID int64, desc bool) {
	cmp := ">"
	if desc {
		cmp = "<"
	}
	mid := w.Arg(markerID)
	if sort == "" {
		w.Add(fmt.Sprintf("%s %s %s", idCol, cmp, mid))
		return
	}
	// Rows whose sort value is NULL come after all others ascending and
	// before them descending.
	nullSide := "(%[1]s IS NULL AND %[3]s IS NOT NULL)"
	if desc {
		nullSide = "(%[1]s IS NOT NULL AND %[3]s IS NULL)"
	}
	w.Add(fmt.Sprintf("(%[1]s %[2]s %[3]s OR (%[1]s = %[3]s AND %[4]s %[2]s %[5]s) OR "+nullSide+
		" OR (%[1]s IS NULL AND %[3]s IS NULL AND %[4]s %[2]s %[5]s))", sort, cmp, markerSort, idCol, mid))
}

// OrderBy returns " ORDER BY sort dir, id dir LIMIT n" for the keyset order
// After pages through ("" sort: id alone).
func OrderBy(sort, idCol string, desc bool, limit int) string {
	dir := " ASC"
	if desc {
		dir = " DESC"
	}
	order := " ORDER BY " + idCol + dir
	if sort != "" {
		order = " ORDER BY " + sort + dir + ", " + idCol + dir
	}
	return order + " LIMIT " + strconv.Itoa(limit)
}
