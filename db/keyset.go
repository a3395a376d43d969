package db

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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

// Page is one page of a keyset list of a table with id and uuid columns.
type Page struct {
	// Limit is the page size (> 0).
	Limit int
	// Marker is the uuid of the last row of the previous page (nil: the
	// first page); one that names no row is ErrNoMarker.
	Marker *uuid.UUID
	// SortKey is a column of the caller's whitelist ("" = id).
	SortKey  string
	SortDesc bool
}

// ErrNoMarker is ListPage's error for a marker that names no row.
var ErrNoMarker = errors.New("no row has the marker uuid")

// Queryer runs queries (a pool, a connection or a transaction).
type Queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ListPage queries one page of table's rows (columns, a fixed list) in
// (p.SortKey, id) order after p.Marker, as After and OrderBy page: the
// list of a resource without filters (chassis, deploy templates). The sort
// key must be one of keys; table, columns and keys are the caller's
// constants, never request text. The caller scans and closes the rows.
func ListPage(ctx context.Context, q Queryer, table, columns string, keys []string, p Page) (pgx.Rows, error) {
	sortKey := p.SortKey
	if sortKey == "" {
		sortKey = "id"
	}
	if !slices.Contains(keys, sortKey) {
		return nil, fmt.Errorf("sort key %q of %s", sortKey, table)
	}
	if p.Limit <= 0 {
		return nil, fmt.Errorf("list of %s: limit must be positive", table)
	}
	sort := ""
	if sortKey != "id" {
		sort = "t." + sortKey
	}
	var w Where
	if p.Marker != nil {
		var markerID int64
		err := q.QueryRow(ctx, `SELECT id FROM `+table+` WHERE uuid = $1`, *p.Marker).Scan(&markerID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrNoMarker
		}
		if err != nil {
			return nil, err
		}
		markerSort := ""
		if sort != "" {
			markerSort = fmt.Sprintf("(SELECT m.%s FROM %s m WHERE m.id = %d)", sortKey, table, markerID)
		}
		w.After(sort, markerSort, "t.id", markerID, p.SortDesc)
	}
	return q.Query(ctx, `SELECT `+columns+` FROM `+table+` t`+w.SQL()+OrderBy(sort, "t.id", p.SortDesc, p.Limit), w.Args...)
}
