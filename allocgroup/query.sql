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

-- name: LockPlanNodes :many
-- Locks up to @wanted of @nodes, in their order, that are still free and
-- fit, skipping nodes another transaction holds (never waiting: a group
-- reservation cannot deadlock with another).
SELECT n.id, n.uuid
  FROM unnest(@nodes::bigint[]) WITH ORDINALITY c (id, ord)
  JOIN free_nodes n ON n.id = c.id
 WHERE n.resource_class = @resource_class::text
   AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, sqlc.narg(candidates)::uuid[], sqlc.narg(owner)::text)
   AND metalloc_node_has_traits(n.traits, @traits::text[])
 ORDER BY c.ord
 LIMIT @wanted
   FOR UPDATE OF n SKIP LOCKED;

-- name: LockOwnedGroup :one
-- The compare-and-set guard of a group reservation: the group, locked, if
-- still allocating and @me's, with how many members it has. No row: lost.
SELECT g.count, g.domain,
       (SELECT count(*) FROM allocations a WHERE a.group_id = g.id)::integer AS members
  FROM allocation_groups g
 WHERE g.id = @id AND g.conductor_affinity = @me::bigint AND g.state = 'allocating'
   FOR UPDATE OF g;

-- name: GroupMemberCount :one
SELECT count, (SELECT count(*) FROM allocations a WHERE a.group_id = g.id)::integer AS members
  FROM allocation_groups g WHERE g.id = @id;

-- name: InsertMembers :one
-- The members, one per node, active at once and holding their nodes
-- (metalloc_hold), owned by @me, with the group's request and extra. Their
-- uuids are @member_uuids (same order as @node_ids; the placement backend
-- claims them in Placement first), or random when NULL.
WITH g AS (
    SELECT ag.id, ag.resource_class, ag.candidate_nodes, ag.extra, ag.owner, ag.traits
      FROM allocation_groups ag WHERE ag.id = @group_id::bigint
), m AS (
    INSERT INTO allocations (uuid, resource_class, candidate_nodes, extra, owner, state, node_id,
                             conductor_affinity, group_id)
    SELECT coalesce((sqlc.narg(member_uuids)::uuid[])[n.ord], gen_random_uuid()), g.resource_class, g.candidate_nodes, g.extra, g.owner, 'active', n.nid,
           @me::bigint, g.id
      FROM g, unnest(@node_ids::bigint[]) WITH ORDINALITY n (nid, ord)
     ORDER BY n.ord
    RETURNING allocations.id, allocations.uuid, allocations.node_id
), t AS (
    INSERT INTO allocation_traits (allocation_id, trait)
    SELECT m.id, unnest(g.traits) FROM m, g
), h AS (
    SELECT metalloc_hold(m.node_id, m.id, m.uuid, g.traits) FROM m, g
)
SELECT (SELECT count(*) FROM h)::integer AS held;

-- name: ActivateGroup :exec
-- allocating -> active once every member is in; the group row is locked
-- by LockOwnedGroup in the same transaction. The domain is recorded at the
-- first placement (where a grow goes).
UPDATE allocation_groups
   SET state = 'active', last_error = NULL, updated_at = now(),
       domain = CASE WHEN @first::boolean THEN sqlc.narg(domain)::text[] ELSE domain END
 WHERE id = @id;

-- name: FailGroup :execrows
-- allocating -> error with a reason and no member, or, for a grow that
-- failed, back to active with count = its members; only while @me owns it.
UPDATE allocation_groups g
   SET state = CASE WHEN m.n > 0 THEN 'active' ELSE 'error' END,
       count = CASE WHEN m.n > 0 THEN m.n ELSE g.count END,
       last_error = @last_error, updated_at = now()
  FROM (SELECT count(*)::integer AS n FROM allocations a WHERE a.group_id = @id) m
 WHERE g.id = @id AND g.conductor_affinity = @me::bigint AND g.state = 'allocating';
