package port

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/metalloc/metalloc/db"
)

// The list queries are built here, as node/list.go builds the node list:
// the filters, sort key and keyset predicate vary per request. Only
// whitelisted column names (PortSortKeys, PortgroupSortKeys) are spliced in;
// every value is a bind parameter. Pagination is keyset on (sort key, id).

// ListOptions selects and orders a page of ports or port groups. Nil
// filters are unset.
type ListOptions struct {
	// Limit is the page size (required, > 0).
	Limit int
	// Marker is the uuid of the last item of the previous page (an unknown
	// one is ErrNotFound).
	Marker *uuid.UUID
	// SortKey is a key of PortSortKeys or PortgroupSortKeys ("" = "id").
	SortKey  string
	SortDesc bool
	// NodeID keeps the node's ports (port groups).
	NodeID *int64
	// PortgroupID keeps the port group's ports (ports only).
	PortgroupID *int64
	// Address keeps the one with this (lower-case) MAC address.
	Address *string
	// Shards keeps ports of nodes in any of these shards (ports only).
	Shards []string
	// Project keeps those of nodes the project owns or leases.
	Project *string
}

// PortSortKeys are the sort_key values of a port list (the ports columns).
var PortSortKeys = map[string]bool{
	"id": true, "uuid": true, "address": true, "node_id": true, "portgroup_id": true,
	"pxe_enabled": true, "physical_network": true, "is_smartnic": true,
	"created_at": true, "updated_at": true,
}

// PortgroupSortKeys are the sort_key values of a port group list.
var PortgroupSortKeys = map[string]bool{
	"id": true, "uuid": true, "name": true, "node_id": true, "address": true, "mode": true,
	"standalone_ports_supported": true, "created_at": true, "updated_at": true,
}

const portColumns = `p.id, p.uuid, p.address, p.node_id, p.portgroup_id, p.pxe_enabled,
	p.local_link_connection, p.physical_network, p.is_smartnic, p.extra, p.internal_info,
	p.created_at, p.updated_at, n.uuid, n.owner, n.lessee, g.uuid`

const portgroupColumns = `p.id, p.uuid, p.name, p.node_id, p.address, p.mode, p.properties,
	p.standalone_ports_supported, p.extra, p.internal_info, p.created_at, p.updated_at,
	n.uuid, n.owner, n.lessee`

// where builds the filters and keyset predicate of a list of table.
func (s *Store) where(ctx context.Context, table string, opts ListOptions, keys map[string]bool) (db.Where, string, error) {
	var w db.Where
	sortKey := opts.SortKey
	if sortKey == "" {
		sortKey = "id"
	}
	if !keys[sortKey] {
		return w, "", fmt.Errorf("sort key %q of %s", sortKey, table)
	}
	if opts.Limit <= 0 {
		return w, "", fmt.Errorf("list of %s: limit must be positive", table)
	}
	db.Eq(&w, "p.node_id", opts.NodeID)
	db.Eq(&w, "p.portgroup_id", opts.PortgroupID)
	db.Eq(&w, "p.address", opts.Address)
	if opts.Shards != nil {
		w.Add("n.shard = ANY(" + w.Arg(opts.Shards) + "::text[])")
	}
	if opts.Project != nil {
		a := w.Arg(*opts.Project)
		w.Add("(n.owner = " + a + " OR n.lessee = " + a + ")")
	}
	sort := ""
	if sortKey != "id" {
		sort = "p." + sortKey
	}
	if opts.Marker != nil {
		var markerID int64
		if err := s.pool.QueryRow(ctx, `SELECT id FROM `+table+` WHERE uuid = $1`, *opts.Marker).Scan(&markerID); err != nil {
			return w, "", notFound(err, "marker", opts.Marker.String())
		}
		markerSort := ""
		if sort != "" {
			markerSort = fmt.Sprintf("(SELECT m.%s FROM %s m WHERE m.id = %d)", sortKey, table, markerID)
		}
		w.After(sort, markerSort, "p.id", markerID, opts.SortDesc)
	}
	return w, w.SQL() + db.OrderBy(sort, "p.id", opts.SortDesc, opts.Limit), nil
}

// ListPorts returns one page of ports matching opts.
func (s *Store) ListPorts(ctx context.Context, opts ListOptions) ([]Port, error) {
	w, tail, err := s.where(ctx, "ports", opts, PortSortKeys)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+portColumns+` FROM ports p JOIN nodes n ON n.id = p.node_id
	LEFT JOIN portgroups g ON g.id = p.portgroup_id`+tail, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("listing ports: %w", err)
	}
	defer rows.Close()
	var out []Port
	for rows.Next() {
		var r PortRow
		var nodeUUID uuid.UUID
		var pg *uuid.UUID
		var owner, lessee *string
		if err := rows.Scan(&r.ID, &r.Uuid, &r.Address, &r.NodeID, &r.PortgroupID, &r.PxeEnabled,
			&r.LocalLinkConnection, &r.PhysicalNetwork, &r.IsSmartnic, &r.Extra, &r.InternalInfo,
			&r.CreatedAt, &r.UpdatedAt, &nodeUUID, &owner, &lessee, &pg); err != nil {
			return nil, fmt.Errorf("reading ports: %w", err)
		}
		p, err := portFromRow(r, nodeUUID, pg, owner, lessee)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing ports: %w", err)
	}
	return out, nil
}

// ListPortgroups returns one page of port groups matching opts.
func (s *Store) ListPortgroups(ctx context.Context, opts ListOptions) ([]Portgroup, error) {
	w, tail, err := s.where(ctx, "portgroups", opts, PortgroupSortKeys)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+portgroupColumns+` FROM portgroups p JOIN nodes n ON n.id = p.node_id`+tail, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("listing portgroups: %w", err)
	}
	defer rows.Close()
	var out []Portgroup
	for rows.Next() {
		var r PortgroupRow
		var nodeUUID uuid.UUID
		var owner, lessee *string
		if err := rows.Scan(&r.ID, &r.Uuid, &r.Name, &r.NodeID, &r.Address, &r.Mode, &r.Properties,
			&r.StandalonePortsSupported, &r.Extra, &r.InternalInfo, &r.CreatedAt, &r.UpdatedAt,
			&nodeUUID, &owner, &lessee); err != nil {
			return nil, fmt.Errorf("reading portgroups: %w", err)
		}
		g, err := portgroupFromRow(r, nodeUUID, owner, lessee)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing portgroups: %w", err)
	}
	return out, nil
}
