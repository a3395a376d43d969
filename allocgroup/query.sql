-- name: CreateGroup :one
-- A new group is allocating and unclaimed (allocation_groups_notify_insert
-- wakes the conductors at commit).
INSERT INTO allocation_groups (uuid, name, count, resource_class, traits, candidate_nodes, owner, extra,
                               rule, rule_level)
VALUES (@uuid, @name, @count, @resource_class, @traits, @candidate_nodes, @owner, @extra,
        @rule, @rule_level)
RETURNING *;

-- name: GetGroup :one
SELECT * FROM allocation_groups WHERE id = @id;

-- name: GetGroupByUUID :one
SELECT * FROM allocation_groups WHERE uuid = @uuid;

-- name: GetGroupByName :one
SELECT * FROM allocation_groups WHERE name = @name;

-- name: ListGroups :many
-- One page of groups in id order after @after, filtered by the non-null
-- arguments.
SELECT * FROM allocation_groups g
 WHERE g.id > @after::bigint
   AND (sqlc.narg(state)::text IS NULL OR g.state = sqlc.narg(state)::text)
   AND (sqlc.narg(resource_class)::text IS NULL OR g.resource_class = sqlc.narg(resource_class)::text)
   AND (sqlc.narg(owner)::text IS NULL OR g.owner = sqlc.narg(owner)::text)
 ORDER BY g.id
 LIMIT @max_rows;

-- name: MembersOf :many
-- The members of the given groups, with their nodes, in id order.
SELECT a.group_id::bigint AS group_id, a.uuid, n.uuid AS node_uuid
  FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id
 WHERE a.group_id = ANY(@group_ids::bigint[])
 ORDER BY a.id;

-- name: MemberNodes :many
-- The nodes of a group's members (an unlocked read: DELETE then locks
-- them in id order).
SELECT a.node_id::bigint AS node_id FROM allocations a
 WHERE a.group_id = @group_id AND a.node_id IS NOT NULL
 ORDER BY a.node_id;

-- name: LockNodes :many
-- Locks the given nodes in id order, waiting (group DELETE: nodes first).
SELECT n.id, n.uuid, n.provision_state, n.target_provision_state, n.maintenance
  FROM nodes n WHERE n.id = ANY(@ids::bigint[])
 ORDER BY n.id
   FOR UPDATE;

-- name: LockMembers :many
-- Locks a group's members (after their nodes), in id order.
SELECT a.id, a.uuid, a.node_id FROM allocations a
 WHERE a.group_id = @group_id
 ORDER BY a.id
   FOR UPDATE;

-- name: LockGroup :one
-- Locks a group (after its members' nodes and rows).
SELECT * FROM allocation_groups WHERE id = @id FOR UPDATE;

-- name: DeallocateMembers :exec
-- Releases the given members (metalloc_deallocate each, in id order); the
-- caller locked their nodes and rows.
SELECT metalloc_deallocate(m.id) FROM unnest(@ids::bigint[]) m (id) ORDER BY m.id;

-- name: DeleteGroup :exec
DELETE FROM allocation_groups WHERE id = @id;

-- name: GrowGroup :one
-- PATCH count up: back to allocating and unowned, for a conductor to add
-- the members (allocation_groups_notify_update wakes them).
UPDATE allocation_groups
   SET count = @count, state = 'allocating', conductor_affinity = NULL, last_error = NULL, updated_at = now()
 WHERE id = @id
RETURNING *;

-- name: UpdateGroupNameExtra :exec
UPDATE allocation_groups SET name = @name, extra = @extra, updated_at = now() WHERE id = @id;

-- name: GroupMemberCount :one
SELECT count, (SELECT count(*) FROM allocations a WHERE a.group_id = g.id)::integer AS members
  FROM allocation_groups g WHERE g.id = @id;

