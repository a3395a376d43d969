package node

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/metalloc/metalloc/db"
)

// The node list query is built here, in Go, rather than in query.sql: its
// WHERE clause depends on which of a dozen filters a request sets, and its
// ORDER BY and keyset predicate on the requested sort key and direction.
// sqlc compiles only static SQL, and one static query covering every
// combination (`($1::text IS NULL OR provision_state = $1) AND ...` plus a
// CASE per sortable column) would defeat the planner's use of the indexes.
// Only whitelisted column expressions (sortColumns) and fixed SQL fragments
// are ever spliced in; every value travels as a bind parameter.

// ListOptions selects and orders a page of nodes. Nil filters are unset.
type ListOptions struct {
	// Limit is the page size (required, > 0).
	Limit int
	// Marker is the uuid of the last node of the previous page; the page
	// starts after it in the requested order (keyset pagination on
	// (sort key, id), never OFFSET). An unknown marker is ErrNotFound.
	Marker *uuid.UUID
	// SortKey is a key of SortKeys ("" = "id").
	SortKey string
	// SortDesc sorts descending (NULLs first, as PostgreSQL does).
	SortDesc bool

	// Filters, as Ironic's list parameters of the same names: equality on
	// the column, except Associated (instance_uuid set), Sharded (shard
	// set), Project (owner or lessee), DescriptionContains (substring) and
	// Shards (any of).
	ProvisionState      *string
	Maintenance         *bool
	Associated          *bool
	Retired             *bool
	Sharded             *bool
	Driver              *string
	ResourceClass       *string
	Fault               *string
	ConductorGroup      *string
	Owner               *string
	Lessee              *string
	Project             *string // owner or lessee
	DescriptionContains *string
	InstanceUUID        *uuid.UUID
	Shards              []string
	// ChassisID keeps the nodes of this chassis.
	ChassisID *int64
	// Reservable keeps the nodes in (true) or out of (false) the pool
	// leases take from (metalloc's; Blazar's os-hosts, lease/blazar).
	Reservable *bool
	// ID keeps the node of this internal id (Blazar's host id, lease/blazar).
	ID *int64
}

// SortKeys maps the sort_key values a node list accepts to SQL expressions
// over the nodes table aliased %[1]s. Empty expressions are Ironic columns
// metalloc does not store (always NULL): sorting by them is sorting by id.
// The hardware interface fields sort by their key in interfaces.
var SortKeys = withInterfaceSortKeys(map[string]string{
	"id": "", "uuid": "%[1]s.uuid", "name": "%[1]s.name", "driver": "%[1]s.driver",
	"resource_class": "%[1]s.resource_class", "provision_state": "%[1]s.provision_state",
	"target_provision_state": "%[1]s.target_provision_state",
	"provision_updated_at":   "%[1]s.provision_updated_at", "power_state": "%[1]s.power_state",
	"target_power_state": "%[1]s.target_power_state", "maintenance": "%[1]s.maintenance",
	"maintenance_reason": "%[1]s.maintenance_reason", "fault": "%[1]s.fault",
	"last_error": "%[1]s.last_error", "instance_uuid": "%[1]s.instance_uuid",
	"allocation_id": "%[1]s.allocation_id", "owner": "%[1]s.owner", "lessee": "%[1]s.lessee",
	"description": "%[1]s.description", "conductor_group": "%[1]s.conductor_group",
	"reservation": "%[1]s.reservation", "protected": "%[1]s.protected",
	"protected_reason": "%[1]s.protected_reason", "retired": "%[1]s.retired",
	"retired_reason": "%[1]s.retired_reason", "automated_clean": "%[1]s.automated_clean",
	"console_enabled": "%[1]s.console_enabled", "shard": "%[1]s.shard",
	"created_at": "%[1]s.created_at", "updated_at": "%[1]s.updated_at",
	"chassis_id": "%[1]s.chassis_id", "conductor_affinity": "", "inspection_started_at": "",
	"inspection_finished_at": "", "boot_mode": "", "secure_boot": "", "version": "",
})

// withInterfaceSortKeys adds a sort key per hardware interface field
// (InterfaceFields) to keys and returns it.
func withInterfaceSortKeys(keys map[string]string) map[string]string {
	for _, f := range InterfaceFields {
		keys[f] = "(%[1]s.interfaces->>'" + f + "')"
	}
	return keys
}

// nodeColumns are the nodes columns in NodeRow order.
const nodeColumns = `n.id, n.uuid, n.name, n.driver, n.resource_class, n.provision_state,
	n.target_provision_state, n.provision_updated_at, n.power_state, n.target_power_state,
	n.maintenance, n.maintenance_reason, n.fault, n.last_error, n.instance_uuid, n.allocation_id,
	n.owner, n.lessee, n.description, n.conductor_group, n.reservation, n.protected,
	n.protected_reason, n.retired, n.retired_reason, n.automated_clean, n.console_enabled, n.shard,
	n.properties, n.extra, n.instance_info, n.driver_info, n.driver_internal_info, n.interfaces,
	n.network_data, n.raid_config, n.target_raid_config, n.created_at, n.updated_at, n.chassis_id`

// List returns one page of nodes matching opts, in (sort key, id) order.
func (s *Store) List(ctx context.Context, opts ListOptions) ([]Node, error) {
	sortKey := opts.SortKey
	if sortKey == "" {
		sortKey = "id"
	}
	exprFmt, ok := SortKeys[sortKey]
	if !ok {
		return nil, invalidf("The sort_key value \"%s\" is an invalid field for sorting", sortKey)
	}
	if opts.Limit <= 0 {
		return nil, invalidf("Limit must be positive")
	}
	var w db.Where
	db.Eq(&w, "n.provision_state", opts.ProvisionState)
	db.Eq(&w, "n.driver", opts.Driver)
	db.Eq(&w, "n.resource_class", opts.ResourceClass)
	db.Eq(&w, "n.fault", opts.Fault)
	db.Eq(&w, "n.conductor_group", opts.ConductorGroup)
	db.Eq(&w, "n.owner", opts.Owner)
	db.Eq(&w, "n.lessee", opts.Lessee)
	db.Eq(&w, "n.maintenance", opts.Maintenance)
	db.Eq(&w, "n.retired", opts.Retired)
	db.Eq(&w, "n.instance_uuid", opts.InstanceUUID)
	db.Eq(&w, "n.chassis_id", opts.ChassisID)
	db.Eq(&w, "n.reservable", opts.Reservable)
	db.Eq(&w, "n.id", opts.ID)
	if opts.Associated != nil {
		w.Add(nullCheck("n.instance_uuid", *opts.Associated))
	}
	if opts.Sharded != nil {
		w.Add(nullCheck("n.shard", *opts.Sharded))
	}
	if opts.Project != nil {
		p := w.Arg(*opts.Project)
		w.Add("(n.owner = " + p + " OR n.lessee = " + p + ")")
	}
	if opts.DescriptionContains != nil {
		w.Add("strpos(n.description, " + w.Arg(*opts.DescriptionContains) + ") > 0")
	}
	if opts.Shards != nil {
		w.Add("n.shard = ANY(" + w.Arg(opts.Shards) + "::text[])")
	}
	sort := ""
	if exprFmt != "" {
		sort = fmt.Sprintf(exprFmt, "n")
	}
	if opts.Marker != nil {
		var markerID int64
		err := s.pool.QueryRow(ctx, `SELECT id FROM nodes WHERE uuid = $1`, *opts.Marker).Scan(&markerID)
		if err != nil {
			return nil, noRows(err, "reading marker node", opts.Marker.String())
		}
		markerSort := ""
		if exprFmt != "" {
			markerSort = fmt.Sprintf("(SELECT "+exprFmt+" FROM nodes m WHERE m.id = %d)", "m", markerID)
		}
		w.After(sort, markerSort, "n.id", markerID, opts.SortDesc)
	}
	query := "SELECT " + nodeColumns + `, a.uuid, (SELECT ch.uuid FROM chassis ch WHERE ch.id = n.chassis_id),
	coalesce((SELECT array_agg(t.trait ORDER BY t.trait) FROM node_traits t WHERE t.node_id = n.id), '{}')::text[]
	FROM nodes n LEFT JOIN allocations a ON a.id = n.allocation_id` + w.SQL() + db.OrderBy(sort, "n.id", opts.SortDesc, opts.Limit)

	rows, err := s.pool.Query(ctx, query, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	defer rows.Close()
	var out []Node
	for rows.Next() {
		var r NodeRow
		var alloc, chassis *uuid.UUID
		var traits []string
		if err := rows.Scan(&r.ID, &r.Uuid, &r.Name, &r.Driver, &r.ResourceClass, &r.ProvisionState,
			&r.TargetProvisionState, &r.ProvisionUpdatedAt, &r.PowerState, &r.TargetPowerState,
			&r.Maintenance, &r.MaintenanceReason, &r.Fault, &r.LastError, &r.InstanceUuid, &r.AllocationID,
			&r.Owner, &r.Lessee, &r.Description, &r.ConductorGroup, &r.Reservation, &r.Protected,
			&r.ProtectedReason, &r.Retired, &r.RetiredReason, &r.AutomatedClean, &r.ConsoleEnabled, &r.Shard,
			&r.Properties, &r.Extra, &r.InstanceInfo, &r.DriverInfo, &r.DriverInternalInfo, &r.Interfaces,
			&r.NetworkData, &r.RaidConfig, &r.TargetRaidConfig, &r.CreatedAt, &r.UpdatedAt, &r.ChassisID,
			&alloc, &chassis, &traits); err != nil {
			return nil, fmt.Errorf("reading node list: %w", err)
		}
		n, err := fromRow(r, alloc, chassis, traits)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return out, nil
}

func nullCheck(col string, notNull bool) string {
	if notNull {
		return col + " IS NOT NULL"
	}
	return col + " IS NULL"
}
