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
// columns. extra, candidate_nodes and traits are refused, as in Ironic.
var sortColumns = map[string]string{
	"id": "a.id", "uuid": "a.uuid", "name": "a.name", "state": "a.state",
	"resource_class": "a.resource_class", "owner": "a.owner", "last_error": "a.last_error",
	"created_at": "a.created_at", "updated_at": "a.updated_at", "node_id": "a.node_id",
	"conductor_affinity": "a.conductor_affinity",
}

const listColumns = `a.id, a.uuid, a.name, a.node_id, a.state, a.last_error, a.resource_class,
	a.candidate_nodes, a.extra, a.owner, a.conductor_affinity, a.created_at, a.updated_at,
	n.uuid, (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
	           FROM allocation_traits t WHERE t.allocation_id = a.id)::text[]`

// List returns one page of allocations matching f. This is the one query
// built at run time rather than by sqlc: its filters, sort column and keyset
// condition vary per request. Column names come only from sortColumns; every
// value is a bound parameter.
func (s *Store) List(ctx context.Context, f ListFilter, sortKey string, desc bool, marker *View, limit int) ([]View, error) {
	col, ok := sortColumns[sortKey]
	if !ok {
		return nil, fmt.Errorf("unsupported sort key %q", sortKey)
	}
	var w db.Where
	if f.State != nil {
		w.Add("a.state = ?", *f.State)
	}
	if f.ResourceClass != nil {
		w.Add("a.resource_class = ?", *f.ResourceClass)
	}
	if f.NodeID != nil {
		w.Add("a.node_id = ?", *f.NodeID)
	}
	if f.Owner != nil {
		w.Add("a.owner = ?", *f.Owner)
	}
	page := db.Page{SortColumn: col, Desc: desc, Limit: limit}
	if marker != nil {
		page.HasMarker, page.MarkerID = true, marker.ID
		page.MarkerValue = marker.sortValue(sortKey)
	}
	tail := page.Apply(&w, "a.id")
	sql := "SELECT " + listColumns + " FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id " + w.SQL() + tail
	rows, err := s.pool.Query(ctx, sql, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("listing allocations: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (View, error) {
		var v View
		var nodeUUID *uuid.UUID
		err := r.Scan(&v.ID, &v.Uuid, &v.Name, &v.NodeID, &v.State, &v.LastError, &v.ResourceClass,
			&v.CandidateNodes, &v.Extra, &v.Owner, &v.ConductorAffinity, &v.CreatedAt, &v.UpdatedAt,
			&nodeUUID, &v.Traits)
		v.NodeUUID = nodeUUID
		return v, err
	})
}

// sortValue is v's value of the sort column named key, nil for NULL.
func (v View) sortValue(key string) any {
	switch key {
	case "uuid":
		return v.Uuid
	case "name":
		return nilIfNil(v.Name)
	case "state":
		return v.State
	case "resource_class":
		return v.ResourceClass
	case "owner":
		return nilIfNil(v.Owner)
	case "last_error":
		return nilIfNil(v.LastError)
	case "created_at":
		return v.CreatedAt
	case "updated_at":
		if v.UpdatedAt == nil {
			return nil
		}
		return *v.UpdatedAt
	case "node_id":
		return nilIfNil(v.NodeID)
	case "conductor_affinity":
		return nilIfNil(v.ConductorAffinity)
	}
	return v.ID
}

func nilIfNil[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
