package allocation

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/db"
)

// ListFilter narrows GET /v1/allocations; nil fields do not filter.
type ListFilter struct {
	State         *string
	ResourceClass *string
	NodeID        *int64
	Owner         *string
}

// sortColumns maps the sort_key values Ironic accepts for allocations to
// columns of allocations aliased %[1]s ("" = by id). extra, candidate_nodes
// and traits are refused, as in Ironic.
var sortColumns = map[string]string{
	"id": "", "uuid": "%[1]s.uuid", "name": "%[1]s.name", "state": "%[1]s.state",
	"resource_class": "%[1]s.resource_class", "owner": "%[1]s.owner", "last_error": "%[1]s.last_error",
	"created_at": "%[1]s.created_at", "updated_at": "%[1]s.updated_at", "node_id": "%[1]s.node_id",
	"conductor_affinity": "%[1]s.conductor_affinity",
}

const listColumns = `a.id, a.uuid, a.name, a.node_id, a.state, a.last_error, a.resource_class,
	a.candidate_nodes, a.extra, a.owner, a.conductor_affinity, a.created_at, a.updated_at,
	n.uuid, (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
	           FROM allocation_traits t WHERE t.allocation_id = a.id)::text[],
	a.group_id, (SELECT g.uuid FROM allocation_groups g WHERE g.id = a.group_id)`

// List returns one page of allocations matching f in (sortKey, id) order,
// after the allocation with id markerID when markerID > 0. This is the one
// allocation query built at run time rather than by sqlc: its filters, sort
// column and keyset condition vary per request. Column names come only from
// sortColumns; every value is a bound parameter.
func (s *Store) List(ctx context.Context, f ListFilter, sortKey string, desc bool, markerID int64, limit int) ([]View, error) {
	colFmt, ok := sortColumns[sortKey]
	if !ok {
		return nil, fmt.Errorf("unsupported sort key %q", sortKey)
	}
	var w db.Where
	db.Eq(&w, "a.state", f.State)
	db.Eq(&w, "a.resource_class", f.ResourceClass)
	db.Eq(&w, "a.node_id", f.NodeID)
	db.Eq(&w, "a.owner", f.Owner)
	sort := ""
	if colFmt != "" {
		sort = fmt.Sprintf(colFmt, "a")
	}
	if markerID > 0 {
		markerSort := ""
		if colFmt != "" {
			markerSort = fmt.Sprintf("(SELECT "+colFmt+" FROM allocations m WHERE m.id = %d)", "m", markerID)
		}
		w.After(sort, markerSort, "a.id", markerID, desc)
	}
	sql := "SELECT " + listColumns + " FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id" +
		w.SQL() + db.OrderBy(sort, "a.id", desc, limit)
	rows, err := s.pool.Query(ctx, sql, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("listing allocations: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (View, error) {
		var v View
		var nodeUUID *uuid.UUID
		err := r.Scan(&v.ID, &v.Uuid, &v.Name, &v.NodeID, &v.State, &v.LastError, &v.ResourceClass,
			&v.CandidateNodes, &v.Extra, &v.Owner, &v.ConductorAffinity, &v.CreatedAt, &v.UpdatedAt,
			&nodeUUID, &v.Traits, &v.GroupID, &v.GroupUUID)
		v.NodeUUID = nodeUUID
		return v, err
	})
}
