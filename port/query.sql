-- name: GetNodeRef :one
-- The node a port or port group belongs to or names, by uuid or by name.
SELECT id, uuid, owner, lessee, provision_state, maintenance, instance_uuid
FROM nodes
WHERE (sqlc.narg(node_uuid)::uuid IS NOT NULL AND uuid = sqlc.narg(node_uuid))
   OR (sqlc.narg(node_name)::text IS NOT NULL AND name = sqlc.narg(node_name));

-- name: LockNodeRef :one
-- Every port and port group change holds its node's row lock, as Ironic
-- holds the node's lock (task_manager.acquire) for them.
SELECT id, uuid, owner, lessee, provision_state, maintenance, instance_uuid
FROM nodes WHERE id = $1 FOR UPDATE;

-- name: LockNodeRefNowait :one
-- A second node's lock taken against the lock order (a lower id than the
-- node already held): fails at once with 55P03 instead of waiting, and the
-- transaction starts over (db.InTx), so two opposite moves cannot deadlock.
SELECT id, uuid, owner, lessee, provision_state, maintenance, instance_uuid
FROM nodes WHERE id = $1 FOR UPDATE NOWAIT;

-- name: GetPort :one
SELECT sqlc.embed(p), n.uuid AS node_uuid, n.owner AS node_owner, n.lessee AS node_lessee,
       g.uuid AS portgroup_uuid
FROM ports p JOIN nodes n ON n.id = p.node_id LEFT JOIN portgroups g ON g.id = p.portgroup_id
WHERE p.uuid = $1;

-- name: InsertPort :one
INSERT INTO ports (uuid, address, node_id, portgroup_id, pxe_enabled, local_link_connection,
                   physical_network, is_smartnic, extra)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING id;

-- name: UpdatePort :execrows
UPDATE ports SET address = $2, node_id = $3, portgroup_id = $4, pxe_enabled = $5,
    local_link_connection = $6, physical_network = $7, is_smartnic = $8, extra = $9,
    updated_at = now()
WHERE id = $1;

-- name: DeletePort :execrows
DELETE FROM ports WHERE id = $1;

-- name: GetPortgroupByUUID :one
SELECT sqlc.embed(g), n.uuid AS node_uuid, n.owner AS node_owner, n.lessee AS node_lessee
FROM portgroups g JOIN nodes n ON n.id = g.node_id
WHERE g.uuid = $1;

-- name: GetPortgroupByName :one
SELECT sqlc.embed(g), n.uuid AS node_uuid, n.owner AS node_owner, n.lessee AS node_lessee
FROM portgroups g JOIN nodes n ON n.id = g.node_id
WHERE g.name = $1;

-- name: InsertPortgroup :one
INSERT INTO portgroups (uuid, name, node_id, address, mode, properties,
                        standalone_ports_supported, extra)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING id;

-- name: UpdatePortgroup :execrows
UPDATE portgroups SET name = $2, node_id = $3, address = $4, mode = $5, properties = $6,
    standalone_ports_supported = $7, extra = $8, updated_at = now()
WHERE id = $1;

-- name: DeletePortgroup :execrows
DELETE FROM portgroups WHERE id = $1;

-- name: CountPortgroupPorts :one
SELECT count(*) FROM ports WHERE portgroup_id = $1;

-- name: PortUUIDByAddress :one
SELECT uuid FROM ports WHERE address = $1;

-- name: PortgroupUUIDByAddress :one
SELECT uuid FROM portgroups WHERE address = $1;

-- name: PortgroupPhysnets :many
-- The physical networks of a port group's member ports other than port id
-- (NULL included: a port without one).
SELECT DISTINCT physical_network FROM ports WHERE portgroup_id = $1 AND id <> $2;

-- name: PortgroupUUID :one
SELECT uuid FROM portgroups WHERE id = $1;
