-- Chassis (Ironic's /v1/chassis): records nodes may name (nodes.chassis_id).

-- name: InsertChassis :one
INSERT INTO chassis (uuid, description, extra)
VALUES (@uuid, @description, @extra)
RETURNING *;

-- name: GetChassis :one
SELECT * FROM chassis WHERE uuid = @uuid;

-- name: LockChassis :one
-- The chassis, row-locked for a change or its deletion: a node written
-- meanwhile that names it (its foreign key takes a key share lock on the
-- row) waits, so "contains nodes" cannot go stale before the delete.
SELECT * FROM chassis WHERE uuid = @uuid FOR UPDATE;

-- name: UpdateChassis :one
UPDATE chassis SET uuid = @uuid, description = @description, extra = @extra, updated_at = now()
 WHERE id = @id
RETURNING *;

-- name: ChassisHasNodes :one
SELECT EXISTS (SELECT 1 FROM nodes WHERE chassis_id = @id::bigint)::bool AS has_nodes;

-- name: DeleteChassis :exec
DELETE FROM chassis WHERE id = @id;
