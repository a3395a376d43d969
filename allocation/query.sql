-- name: CreateAllocation :one
-- Inserts the row and its traits in one statement. A new row is allocating
-- and unclaimed (the allocations_notify trigger wakes the conductors at
-- commit), or, for a backfill, active on @node_id at once.
WITH a AS (
    INSERT INTO allocations (uuid, name, resource_class, candidate_nodes, extra, owner, state, node_id)
    VALUES (@uuid, @name, @resource_class, @candidate_nodes, @extra, @owner, @state, sqlc.narg(node_id))
    RETURNING *
), t AS (
    INSERT INTO allocation_traits (allocation_id, trait)
    SELECT a.id, unnest(@traits::text[]) FROM a
)
SELECT * FROM a;

-- name: GetAllocation :one
SELECT sqlc.embed(a), n.uuid AS node_uuid,
       (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
          FROM allocation_traits t WHERE t.allocation_id = a.id)::text[] AS traits
  FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id
 WHERE a.id = @id;

-- name: GetAllocationByUUID :one
SELECT sqlc.embed(a), n.uuid AS node_uuid,
       (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
          FROM allocation_traits t WHERE t.allocation_id = a.id)::text[] AS traits
  FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id
 WHERE a.uuid = @uuid;

-- name: GetAllocationByName :one
SELECT sqlc.embed(a), n.uuid AS node_uuid,
       (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
          FROM allocation_traits t WHERE t.allocation_id = a.id)::text[] AS traits
  FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id
 WHERE a.name = @name;

-- name: LockAllocation :one
SELECT * FROM allocations WHERE id = @id FOR UPDATE;

-- name: UpdateAllocationNameExtra :exec
UPDATE allocations SET name = @name, extra = @extra, updated_at = now() WHERE id = @id;

-- name: DeleteAllocation :exec
DELETE FROM allocations WHERE id = @id;

-- name: ReleaseNodeOfAllocation :exec
-- Deallocation: the node forgets the allocation and its instance.
UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL, updated_at = now()
 WHERE allocation_id = @allocation_id;

-- name: LockNode :one
SELECT id, uuid, provision_state, target_provision_state, maintenance, instance_uuid,
       allocation_id, resource_class, owner, lessee
  FROM nodes WHERE id = @id FOR UPDATE;

-- name: NodeTraits :many
SELECT trait FROM node_traits WHERE node_id = @node_id ORDER BY trait;

-- name: NodeHoldingInstance :one
SELECT uuid FROM nodes WHERE instance_uuid = @instance_uuid;

-- name: BackfillNode :exec
-- Backfill: an already-deployed node is recorded as holding the allocation.
UPDATE nodes
   SET allocation_id = @allocation_id, instance_uuid = @instance_uuid,
       instance_info = instance_info || jsonb_build_object('traits', @traits::text[]),
       updated_at = now()
 WHERE id = @id;

-- name: ClaimAllocations :many
-- Takes up to @batch unowned allocating rows for conductor @me, oldest first,
-- skipping rows another conductor is claiming at the same moment.
UPDATE allocations a
   SET conductor_affinity = @me::bigint
 WHERE a.id IN (SELECT u.id FROM allocations u
                 WHERE u.state = 'allocating' AND u.conductor_affinity IS NULL
                 ORDER BY u.id
                 LIMIT @batch FOR UPDATE SKIP LOCKED)
RETURNING a.id, a.uuid, a.name, a.resource_class, a.candidate_nodes, a.owner, a.created_at,
          (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
             FROM allocation_traits t WHERE t.allocation_id = a.id)::text[] AS traits;

-- name: OwnedAllocating :many
-- A conductor's own unfinished rows, resumed at start-up.
SELECT a.id, a.uuid, a.name, a.resource_class, a.candidate_nodes, a.owner, a.created_at,
       (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
          FROM allocation_traits t WHERE t.allocation_id = a.id)::text[] AS traits
  FROM allocations a
 WHERE a.state = 'allocating' AND a.conductor_affinity = @me::bigint
 ORDER BY a.id;

-- name: Reserve :one
-- The reservation, in one statement (one transaction): pick a free matching
-- node at random (a node named like the allocation first), lock it without
-- waiting on nodes others hold (the lock re-checks the filters on the newest
-- row version), activate the allocation only if @me still owns it, and mark
-- the node as holding it with the matched traits in instance_info. node_id is
-- no row when no unlocked node fits; allocation_id is NULL when the
-- allocation is no longer ours (taken over, deleted).
WITH node AS (
    SELECT n.id, n.uuid
      FROM nodes n
     WHERE n.provision_state = 'available' AND NOT n.maintenance
       AND n.power_state IS NOT NULL AND n.instance_uuid IS NULL AND n.allocation_id IS NULL
       AND n.resource_class = @resource_class::text
       AND (sqlc.narg(candidates)::uuid[] IS NULL OR n.uuid = ANY(sqlc.narg(candidates)::uuid[]))
       AND (sqlc.narg(owner)::text IS NULL OR n.owner = sqlc.narg(owner)::text OR n.lessee = sqlc.narg(owner)::text)
       AND NOT EXISTS (SELECT 1 FROM unnest(@traits::text[]) req(trait)
                        WHERE NOT EXISTS (SELECT 1 FROM node_traits nt
                                           WHERE nt.node_id = n.id AND nt.trait = req.trait))
     ORDER BY n.name IS NOT DISTINCT FROM sqlc.narg(name)::text DESC, random()
     LIMIT 1
       FOR UPDATE OF n SKIP LOCKED
), alloc AS (
    UPDATE allocations a
       SET node_id = node.id, state = 'active', last_error = NULL, updated_at = now()
      FROM node
     WHERE a.id = @allocation_id AND a.conductor_affinity = @me::bigint AND a.state = 'allocating'
    RETURNING a.id, a.uuid
), held AS (
    UPDATE nodes n
       SET instance_uuid = alloc.uuid, allocation_id = alloc.id,
           instance_info = n.instance_info || jsonb_build_object('traits', @traits::text[]),
           updated_at = now()
      FROM alloc, node
     WHERE n.id = node.id
    RETURNING n.id
)
SELECT node.id AS node_id, node.uuid AS node_uuid, alloc.id AS allocation_id, held.id AS held_node_id
  FROM node LEFT JOIN alloc ON true LEFT JOIN held ON true;

-- name: FailAllocation :execrows
-- allocating -> error with a reason, only while @me owns the row.
UPDATE allocations
   SET state = 'error', last_error = @last_error, node_id = NULL, updated_at = now()
 WHERE id = @id AND conductor_affinity = @me::bigint AND state = 'allocating';

-- name: FitStats :one
-- Why nothing fits: how many nodes survive each filter in turn, for last_error.
WITH rc AS (
    SELECT n.* FROM nodes n WHERE n.resource_class = @resource_class::text
), avail AS (
    SELECT rc.* FROM rc
     WHERE rc.provision_state = 'available' AND NOT rc.maintenance AND rc.power_state IS NOT NULL
       AND rc.instance_uuid IS NULL AND rc.allocation_id IS NULL
), cand AS (
    SELECT avail.* FROM avail
     WHERE (sqlc.narg(candidates)::uuid[] IS NULL OR avail.uuid = ANY(sqlc.narg(candidates)::uuid[]))
       AND (sqlc.narg(owner)::text IS NULL OR avail.owner = sqlc.narg(owner)::text OR avail.lessee = sqlc.narg(owner)::text)
), fit AS (
    SELECT cand.id FROM cand
     WHERE NOT EXISTS (SELECT 1 FROM unnest(@traits::text[]) req(trait)
                        WHERE NOT EXISTS (SELECT 1 FROM node_traits nt
                                           WHERE nt.node_id = cand.id AND nt.trait = req.trait))
)
SELECT (SELECT count(*) FROM rc)::bigint AS with_class,
       (SELECT count(*) FROM avail)::bigint AS available,
       (SELECT count(*) FROM cand)::bigint AS candidates,
       (SELECT count(*) FROM fit)::bigint AS fitting;

-- name: NodeIDByUUID :one
SELECT id FROM nodes WHERE uuid = @uuid;

-- name: NodeIDByName :one
SELECT id FROM nodes WHERE name = @name;

-- name: ResolveNodes :many
-- candidate_nodes: names and uuids to node uuids.
SELECT uuid, name FROM nodes WHERE uuid = ANY(@uuids::uuid[]) OR name = ANY(@names::text[]);
