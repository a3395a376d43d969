-- name: GetNodeByUUID :one
SELECT sqlc.embed(nodes),
       a.uuid AS allocation_uuid,
       ch.uuid AS chassis_uuid,
       coalesce((SELECT array_agg(t.trait ORDER BY t.trait) FROM node_traits t
                  WHERE t.node_id = nodes.id), '{}')::text[] AS traits
  FROM nodes
  LEFT JOIN allocations a ON a.id = nodes.allocation_id
  LEFT JOIN chassis ch ON ch.id = nodes.chassis_id
 WHERE nodes.uuid = $1;

-- name: GetNodeByName :one
SELECT sqlc.embed(nodes),
       a.uuid AS allocation_uuid,
       ch.uuid AS chassis_uuid,
       coalesce((SELECT array_agg(t.trait ORDER BY t.trait) FROM node_traits t
                  WHERE t.node_id = nodes.id), '{}')::text[] AS traits
  FROM nodes
  LEFT JOIN allocations a ON a.id = nodes.allocation_id
  LEFT JOIN chassis ch ON ch.id = nodes.chassis_id
 WHERE nodes.name = $1;

-- name: LockNodeByUUID :one
-- Row-locks the node for a change; conductors reserving nodes use
-- FOR UPDATE SKIP LOCKED, so they pass over a node being changed here.
SELECT sqlc.embed(nodes),
       a.uuid AS allocation_uuid,
       ch.uuid AS chassis_uuid,
       coalesce((SELECT array_agg(t.trait ORDER BY t.trait) FROM node_traits t
                  WHERE t.node_id = nodes.id), '{}')::text[] AS traits
  FROM nodes
  LEFT JOIN allocations a ON a.id = nodes.allocation_id
  LEFT JOIN chassis ch ON ch.id = nodes.chassis_id
 WHERE nodes.uuid = $1
   FOR UPDATE OF nodes;

-- name: LockNodeByName :one
SELECT sqlc.embed(nodes),
       a.uuid AS allocation_uuid,
       ch.uuid AS chassis_uuid,
       coalesce((SELECT array_agg(t.trait ORDER BY t.trait) FROM node_traits t
                  WHERE t.node_id = nodes.id), '{}')::text[] AS traits
  FROM nodes
  LEFT JOIN allocations a ON a.id = nodes.allocation_id
  LEFT JOIN chassis ch ON ch.id = nodes.chassis_id
 WHERE nodes.name = $1
   FOR UPDATE OF nodes;

-- name: InsertNode :one
INSERT INTO nodes (
    uuid, name, driver, resource_class, provision_state, target_provision_state,
    provision_updated_at, power_state, target_power_state, maintenance,
    maintenance_reason, fault, last_error, instance_uuid, owner, lessee,
    description, conductor_group, protected, protected_reason, retired,
    retired_reason, automated_clean, console_enabled, shard, properties, extra,
    instance_info, driver_info, driver_internal_info, interfaces, network_data,
    raid_config, target_raid_config, chassis_id, reservable
) VALUES (
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
    $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32,
    $33, $34, $35, $36
)
RETURNING id, created_at;

-- name: UpdateNode :one
-- Writes every column a node change may touch. allocation_id is left alone:
-- only package allocation (and the conductor) link nodes to allocations.
UPDATE nodes SET
    name = $2,
    driver = $3,
    resource_class = $4,
    provision_state = $5,
    target_provision_state = $6,
    provision_updated_at = $7,
    power_state = $8,
    target_power_state = $9,
    maintenance = $10,
    maintenance_reason = $11,
    fault = $12,
    last_error = $13,
    instance_uuid = $14,
    owner = $15,
    lessee = $16,
    description = $17,
    conductor_group = $18,
    protected = $19,
    protected_reason = $20,
    retired = $21,
    retired_reason = $22,
    automated_clean = $23,
    console_enabled = $24,
    shard = $25,
    properties = $26,
    extra = $27,
    instance_info = $28,
    driver_info = $29,
    driver_internal_info = $30,
    interfaces = $31,
    network_data = $32,
    raid_config = $33,
    target_raid_config = $34,
    chassis_id = $35,
    reservable = $36,
    updated_at = now()
 WHERE id = $1
RETURNING updated_at;

-- name: DeleteNode :execrows
DELETE FROM nodes WHERE id = $1;

-- name: NodeBookings :many
-- The pending or active leases that book node @node_id (its blocking
-- lease_nodes rows), earliest first: Store.Delete refuses to delete a node
-- they hold (docs/leases.md).
SELECT l.uuid, l.name, l.state, l.project_id,
       lower(ln.during)::timestamptz AS start_time, upper(ln.during)::timestamptz AS end_time
  FROM lease_nodes ln JOIN leases l ON l.id = ln.lease_id
 WHERE ln.node_id = @node_id AND NOT ln.released AND l.state IN ('pending', 'active')
 ORDER BY lower(ln.during), l.id;

-- name: DeleteNodeTraits :exec
DELETE FROM node_traits WHERE node_id = $1;

-- name: InsertNodeTraits :exec
INSERT INTO node_traits (node_id, trait)
SELECT @node_id, unnest(@traits::text[])
ON CONFLICT DO NOTHING;

-- name: DeleteNodeTrait :execrows
DELETE FROM node_traits WHERE node_id = $1 AND trait = $2;

-- name: TouchNode :exec
-- Marks a node as changed (trait changes count as node updates, as in Ironic).
UPDATE nodes SET updated_at = now() WHERE id = $1;

-- name: Deallocate :exec
-- The one deallocation (metalloc_deallocate); the caller locked the node.
SELECT metalloc_deallocate(@allocation_id::bigint);

-- name: GetAllocationOwner :one
SELECT owner FROM allocations WHERE id = $1;

-- name: ListOnlineConductors :many
-- Conductors that may serve nodes: the API's `conductor` field picks one of
-- those matching the node's conductor group and driver.
SELECT hostname, conductor_group, drivers
  FROM conductors
 WHERE online
 ORDER BY hostname;

-- name: ExistingNodeIdents :many
-- The uuids and names, among those given, that nodes already use (bulk
-- import: which file entries match an existing node).
SELECT uuid, name FROM nodes
 WHERE uuid = ANY(@uuids::uuid[]) OR name = ANY(@names::text[]);

-- name: CopyNodes :copyfrom
-- Bulk import of new nodes (COPY); columns as InsertNode plus updated_at.
INSERT INTO nodes (
    uuid, name, driver, resource_class, provision_state, target_provision_state,
    provision_updated_at, power_state, target_power_state, maintenance,
    maintenance_reason, fault, last_error, instance_uuid, owner, lessee,
    description, conductor_group, protected, protected_reason, retired,
    retired_reason, automated_clean, console_enabled, shard, properties, extra,
    instance_info, driver_info, driver_internal_info, interfaces, network_data,
    raid_config, target_raid_config, updated_at, reservable
) VALUES (
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
    $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32,
    $33, $34, $35, $36
);

-- name: NodeIDsByUUID :many
SELECT id, uuid FROM nodes WHERE uuid = ANY(@uuids::uuid[]);

-- name: CopyNodeTraits :copyfrom
INSERT INTO node_traits (node_id, trait) VALUES ($1, $2);

-- name: VacuumAnalyzeNodes :exec
-- After a bulk import: fresh planner statistics, so that the first plans
-- made on the imported nodes do not assume an empty or half-enrolled
-- table, and the new rows' hint bits and visibility set by this vacuum
-- rather than by the first allocations' reads, or by autovacuum while they
-- run (its insert-triggered vacuum of nodes comes within a minute of a
-- large import). The import's rate did not change (1,000,000 nodes:
-- 27,662-29,775 nodes/s with it, 27,971-29,305 without, docs/operations.md).
VACUUM (ANALYZE) nodes, node_traits;

-- name: FleetCounts :many
-- The operator page's fleet summary, counted in one pass over the nodes
-- (every node, or with @project set those @project owns or leases): per
-- row, rack (extra.row and extra.rack, '' when absent) and resource class,
-- the nodes, those free (metalloc_node_free, the one definition the
-- conductors reserve by), those without an owner, and those matching the
-- filter (@resource_class, @owner and @trait, each ignored when null) per
-- category (metalloc_node_category: available, allocated, maintenance,
-- manageable, error).
SELECT s.row, s.rack, s.resource_class, count(*)::int AS total,
       (count(*) FILTER (WHERE s.free))::int AS free,
       (count(*) FILTER (WHERE s.no_owner))::int AS no_owner,
       (count(*) FILTER (WHERE s.matched AND s.category = 0))::int AS matched_available,
       (count(*) FILTER (WHERE s.matched AND s.category = 1))::int AS matched_allocated,
       (count(*) FILTER (WHERE s.matched AND s.category = 2))::int AS matched_maintenance,
       (count(*) FILTER (WHERE s.matched AND s.category = 3))::int AS matched_manageable,
       (count(*) FILTER (WHERE s.matched AND s.category = 4))::int AS matched_error
  FROM (SELECT coalesce(n.extra->>'row', '')::text AS row, coalesce(n.extra->>'rack', '')::text AS rack,
               coalesce(n.resource_class, '')::text AS resource_class, n.owner IS NULL AS no_owner,
               metalloc_node_free(n.provision_state, n.maintenance, n.power_state, n.instance_uuid, n.allocation_id) AS free,
               metalloc_node_category(n.provision_state, n.maintenance, n.allocation_id, n.instance_uuid) AS category,
               (sqlc.narg(resource_class)::text IS NULL OR coalesce(n.resource_class, '') = sqlc.narg(resource_class))
               AND (sqlc.narg(owner)::text IS NULL OR coalesce(n.owner, '') = sqlc.narg(owner))
               AND (sqlc.narg(trait)::text IS NULL OR n.id IN (SELECT t.node_id FROM node_traits t WHERE t.trait = sqlc.narg(trait)))
               AS matched
          FROM nodes n
         WHERE sqlc.narg(project)::text IS NULL OR n.owner = sqlc.narg(project) OR n.lessee = sqlc.narg(project)) s
 GROUP BY s.row, s.rack, s.resource_class;

-- name: FleetTraits :many
-- Every trait some node has, sorted: a skip scan of node_traits_trait_idx,
-- one probe per distinct trait however many nodes have each.
WITH RECURSIVE t AS (
    SELECT min(trait) AS trait FROM node_traits
    UNION ALL
    SELECT (SELECT min(n.trait) FROM node_traits n WHERE n.trait > t.trait) FROM t WHERE t.trait IS NOT NULL
)
SELECT t.trait::text AS trait FROM t WHERE t.trait IS NOT NULL;

-- name: FleetOwners :many
-- Every owner some node has (not ''), sorted: a skip scan of
-- nodes_owner_idx.
WITH RECURSIVE o AS (
    SELECT min(owner) AS owner FROM nodes WHERE owner IS NOT NULL
    UNION ALL
    SELECT (SELECT min(n.owner) FROM nodes n WHERE n.owner > o.owner) FROM o WHERE o.owner IS NOT NULL
)
SELECT o.owner::text AS owner FROM o WHERE o.owner IS NOT NULL;

-- name: FleetProjectOwners :many
-- The owners (not '') of the nodes @project owns or leases, sorted.
SELECT DISTINCT n.owner::text AS owner
  FROM nodes n
 WHERE n.owner IS NOT NULL AND (n.owner = @project OR n.lessee = @project)
 ORDER BY 1;

-- name: FleetProjectTraits :many
-- Every trait of the nodes @project owns or leases, sorted.
SELECT DISTINCT t.trait
  FROM node_traits t
  JOIN nodes n ON n.id = t.node_id
 WHERE n.owner = @project OR n.lessee = @project
 ORDER BY t.trait;

-- name: FleetNodes :many
-- The first @max_rows nodes (every node, or with @project set those
-- @project owns or leases) in id order, as the operator page draws them:
-- topology from extra.row and extra.rack ('' when absent), category
-- (metalloc_node_category) and sorted traits (one index probe per node:
-- the caller asks for a few thousand at most).
SELECT n.uuid, coalesce(n.name, '')::text AS name, n.provision_state,
       coalesce(n.resource_class, '')::text AS resource_class, coalesce(n.owner, '')::text AS owner,
       coalesce(n.extra->>'row', '')::text AS row, coalesce(n.extra->>'rack', '')::text AS rack,
       metalloc_node_category(n.provision_state, n.maintenance, n.allocation_id, n.instance_uuid)::int AS category,
       ARRAY(SELECT t.trait FROM node_traits t WHERE t.node_id = n.id ORDER BY t.trait)::text[] AS traits
  FROM nodes n
 WHERE sqlc.narg(project)::text IS NULL OR n.owner = sqlc.narg(project) OR n.lessee = sqlc.narg(project)
 ORDER BY n.id
 LIMIT @max_rows;

-- name: FleetNodesIn :many
-- FleetNodes of topology row @row only, and of its rack @rack when that is
-- set: nodes_topology_idx finds them without reading the others.
SELECT n.uuid, coalesce(n.name, '')::text AS name, n.provision_state,
       coalesce(n.resource_class, '')::text AS resource_class, coalesce(n.owner, '')::text AS owner,
       coalesce(n.extra->>'row', '')::text AS row, coalesce(n.extra->>'rack', '')::text AS rack,
       metalloc_node_category(n.provision_state, n.maintenance, n.allocation_id, n.instance_uuid)::int AS category,
       ARRAY(SELECT t.trait FROM node_traits t WHERE t.node_id = n.id ORDER BY t.trait)::text[] AS traits
  FROM nodes n
 WHERE coalesce(n.extra->>'row', '') = @row::text
   AND (sqlc.narg(rack)::text IS NULL OR coalesce(n.extra->>'rack', '') = sqlc.narg(rack))
   AND (sqlc.narg(project)::text IS NULL OR n.owner = sqlc.narg(project) OR n.lessee = sqlc.narg(project))
 ORDER BY n.id
 LIMIT @max_rows;

-- name: NodeLockHolder :one
-- Who holds node @uuid or @name's row lock, for Ironic's NodeLocked
-- message: the application_name (else the address) of the session whose
-- transaction locked it (the row's xmax); no row when nobody holds it (or
-- a shared lock does).
SELECT n.uuid,
       coalesce(nullif(a.application_name, ''), host(a.client_addr), '')::text AS holder
  FROM nodes n
  JOIN pg_catalog.pg_locks l ON l.locktype = 'transactionid' AND l.granted AND l.transactionid = n.xmax
  JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
 WHERE n.uuid = sqlc.narg(uuid) OR n.name = sqlc.narg(name)
 LIMIT 1;

-- name: DriverServed :one
-- Whether a conductor alive now (metalloc_conductor_alive: online, its
-- expiry not passed) of conductor group @conductor_group
-- (case-insensitive) registered hardware type @driver: Ironic's hash ring
-- lookup for a node being created or changed.
SELECT EXISTS (
    SELECT 1 FROM conductors c
     WHERE metalloc_conductor_alive(c.online, c.expires_at)
       AND lower(c.conductor_group) = lower(@conductor_group::text)
       AND @driver::text = ANY(c.drivers)
)::bool AS served;

-- name: CountNodePorts :one
-- How many ports the node has (the boot and deploy interfaces need one).
SELECT count(*) FROM ports WHERE node_id = @node_id;

-- name: NodeVIFPorts :many
-- The node's ports with the VIF each has attached ('' when none), in id
-- order; the caller holds the node's row lock, which every port change
-- takes too.
SELECT id, uuid, portgroup_id, pxe_enabled,
       coalesce(internal_info->>'tenant_vif_port_id', '')::text AS vif
  FROM ports WHERE node_id = @node_id ORDER BY id;

-- name: NodeVIFPortgroups :many
-- The node's port groups with the VIF each has attached, as NodeVIFPorts.
SELECT id, uuid, coalesce(internal_info->>'tenant_vif_port_id', '')::text AS vif
  FROM portgroups WHERE node_id = @node_id ORDER BY id;

-- name: SetPortVIF :exec
-- Attaches VIF @vif to the port (internal_info tenant_vif_port_id, where
-- Ironic's network interfaces record it).
UPDATE ports SET internal_info = internal_info || jsonb_build_object('tenant_vif_port_id', @vif::text),
       updated_at = now()
 WHERE id = @id;

-- name: ClearPortVIF :exec
-- Detaches the port's VIF (and the legacy extra vif_port_id, as Ironic).
UPDATE ports SET internal_info = internal_info - 'tenant_vif_port_id', extra = extra - 'vif_port_id',
       updated_at = now()
 WHERE id = @id;

-- name: SetPortgroupVIF :exec
UPDATE portgroups SET internal_info = internal_info || jsonb_build_object('tenant_vif_port_id', @vif::text),
       updated_at = now()
 WHERE id = @id;

-- name: ClearPortgroupVIF :exec
UPDATE portgroups SET internal_info = internal_info - 'tenant_vif_port_id', extra = extra - 'vif_port_id',
       updated_at = now()
 WHERE id = @id;

-- name: ChassisIDByUUID :one
-- The chassis a node is put in (a key share lock comes with the node's
-- foreign key when it is written).
SELECT id FROM chassis WHERE uuid = @uuid;

-- name: InsertNodeHistory :exec
-- Records one event of the node's history (in the transaction that
-- changed the node). The conductor column is read and written as
-- conductor_host: sqlc's global rename makes any "conductor" a Record.
INSERT INTO node_history (uuid, node_id, conductor, event, event_type, severity, user_id)
VALUES (@uuid, @node_id, sqlc.narg(conductor_host)::text, @event, @event_type, @severity, @user_id);

-- name: ListNodeHistory :many
-- One page (@max_rows) of the node's history, oldest first, after the
-- event with id @after_id (0: from the start).
SELECT id, uuid, conductor AS conductor_host, event, event_type, severity, user_id, created_at
  FROM node_history
 WHERE node_id = @node_id AND id > @after_id::bigint
 ORDER BY id
 LIMIT @max_rows::int;

-- name: GetNodeHistory :one
-- The node's history event @uuid.
SELECT id, uuid, conductor AS conductor_host, event, event_type, severity, user_id, created_at
  FROM node_history
 WHERE node_id = @node_id AND uuid = @uuid;

-- name: ShardCounts :many
-- Each shard (NULL: nodes in none) with its node count, largest first:
-- Ironic's get_shard_list.
SELECT shard, count(*)::bigint AS nodes
  FROM nodes
 GROUP BY shard
 ORDER BY count(*) DESC, shard NULLS FIRST;

-- name: SetNodesReservable :many
-- metalloc-manage node set-reservable: the nodes named (uuids or names)
-- join or leave the pool leases take from (issue 43).
UPDATE nodes SET reservable = @reservable, updated_at = now()
 WHERE uuid = ANY(@uuids::uuid[]) OR name = ANY(@names::text[])
RETURNING uuid, name;
