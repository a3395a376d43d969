-- name: CreateAllocation :one
-- Inserts the row and its traits in one statement. A new row is allocating
-- and unclaimed (the allocations_notify trigger wakes the conductors at
-- commit), or, for a backfill, active on @node_id at once. No row (nothing
-- inserted) when a node other than @node_id already holds @uuid as its
-- instance_uuid (NodeHoldingInstance then says why: that uuid is an
-- allocation's, or only the node's instance).
WITH a AS (
    INSERT INTO allocations (uuid, name, resource_class, candidate_nodes, extra, owner, state, node_id)
    SELECT @uuid, @name, @resource_class, @candidate_nodes, @extra, @owner, @state, sqlc.narg(node_id)
     WHERE NOT EXISTS (SELECT 1 FROM nodes h
                        WHERE h.instance_uuid = @uuid
                          AND h.id IS DISTINCT FROM sqlc.narg(node_id)::bigint
                        OFFSET 0)
    RETURNING *
), t AS (
    -- The foreign key's check of these rows (allocation_traits to
    -- allocations, at the statement's end) has one plan per session, made
    -- at its first use and kept: planned while allocations was a page or
    -- two (a new fleet's first burst), a sequential scan, read again for
    -- every trait row as the table grows, until an ANALYZE. So sequential
    -- scans are off for the rest of this statement's transaction
    -- (set_config local: an implicit transaction ends with the statement)
    -- and the check has one plan, the key's (issue 44; migration 00045).
    INSERT INTO allocation_traits (allocation_id, trait)
    SELECT a.id, unnest(@traits::text[]) FROM a
     WHERE set_config('enable_seqscan', 'off', true) = 'off'
)
SELECT * FROM a;

-- name: CreateAllocations :many
-- CreateAllocation for a batch of new allocating rows without candidate
-- nodes (allocation.Inserter: concurrent POSTs share one statement and
-- one commit). Row i is (@uuids[i], @names[i] if @has_names[i],
-- @resource_classes[i], @extras[i] (JSON text), @owners[i] if
-- @has_owners[i]); traits are (@trait_uuids[j], @traits[j]) pairs. A row
-- whose uuid a node already holds as its instance_uuid is left out (no
-- row comes back for it); a name or uuid already taken fails the whole
-- statement.
WITH i AS (
    -- Set-returning functions in the select list advance together: row k
    -- takes element k of every array.
    SELECT unnest(@uuids::uuid[]) AS uuid, unnest(@has_names::boolean[]) AS has_name,
           unnest(@names::text[]) AS name, unnest(@resource_classes::text[]) AS resource_class,
           unnest(@extras::text[]) AS extra, unnest(@has_owners::boolean[]) AS has_owner,
           unnest(@owners::text[]) AS owner,
           generate_subscripts(@uuids::uuid[], 1) AS ord
), a AS (
    INSERT INTO allocations (uuid, name, resource_class, extra, owner, state)
    SELECT i.uuid, CASE WHEN i.has_name THEN i.name END, i.resource_class, i.extra::jsonb,
           CASE WHEN i.has_owner THEN i.owner END, 'allocating'
      FROM i
     -- OFFSET 0: a probe of nodes_instance_uuid_key per row, never an
     -- anti-join that reads the whole index.
     WHERE NOT EXISTS (SELECT 1 FROM nodes h WHERE h.instance_uuid = i.uuid OFFSET 0)
     ORDER BY i.ord
    RETURNING *
), t AS (
    INSERT INTO allocation_traits (allocation_id, trait)
    SELECT a.id, tr.trait
      FROM (SELECT unnest(@trait_uuids::uuid[]) AS uuid, unnest(@traits::text[]) AS trait) tr
      JOIN a ON a.uuid = tr.uuid
     -- As CreateAllocation's: the foreign key's check planned by the key.
     WHERE set_config('enable_seqscan', 'off', true) = 'off'
)
SELECT * FROM a;

-- name: GetAllocationByUUID :one
SELECT sqlc.embed(a), n.uuid AS node_uuid,
       (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
          FROM allocation_traits t WHERE t.allocation_id = a.id)::text[] AS traits,
       g.uuid AS allocation_group_uuid
  FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id
  LEFT JOIN allocation_groups g ON g.id = a.group_id
 WHERE a.uuid = @uuid;

-- name: AllocationRefByUUID :one
-- What DELETE needs of an allocation: its ids, node and owner (access).
SELECT id, uuid, node_id, owner FROM allocations WHERE uuid = @uuid;

-- name: AllocationRefByName :one
SELECT id, uuid, node_id, owner FROM allocations WHERE name = @name;

-- name: GetAllocationByName :one
SELECT sqlc.embed(a), n.uuid AS node_uuid,
       (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
          FROM allocation_traits t WHERE t.allocation_id = a.id)::text[] AS traits,
       g.uuid AS allocation_group_uuid
  FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id
  LEFT JOIN allocation_groups g ON g.id = a.group_id
 WHERE a.name = @name;

-- name: LockAllocation :one
SELECT * FROM allocations WHERE id = @id FOR UPDATE;

-- name: UpdateAllocationNameExtra :exec
UPDATE allocations SET name = @name, extra = @extra, updated_at = now() WHERE id = @id;

-- name: Deallocate :exec
-- The one deallocation (metalloc_deallocate): the node holding the
-- allocation forgets it and its instance, and the row is deleted. The caller
-- locked the node first.
SELECT metalloc_deallocate(@allocation_id::bigint);

-- name: DestroyAllocations :many
-- DELETE's one statement, for a batch of deletions in one transaction
-- (metalloc_destroy_allocations): row ord (1-based) deallocates allocation
-- @ids[ord], which an unlocked read found on node @node_ids[ord] (0 for
-- none), if it still names it. outcome 'deleted', 'gone', 'moved' or
-- 'blocked'; the node's fields are those of a 'blocked' outcome (zero
-- values otherwise).
SELECT d.ord::integer AS ord, d.outcome::text AS outcome,
       coalesce(d.node_uuid, '00000000-0000-0000-0000-000000000000')::uuid AS node_uuid,
       coalesce(d.provision_state, '')::text AS provision_state,
       coalesce(d.target_provision_state, '')::text AS target_provision_state,
       coalesce(d.maintenance, false)::boolean AS maintenance
  FROM metalloc_destroy_allocations(@ids::bigint[], @node_ids::bigint[], @update_allowed::text[]) d;

-- name: LockNode :one
SELECT id, uuid, provision_state, target_provision_state, maintenance, instance_uuid,
       allocation_id, resource_class, owner, lessee
  FROM nodes WHERE id = @id FOR UPDATE;

-- name: NodeTraits :many
SELECT trait FROM node_traits WHERE node_id = @node_id ORDER BY trait;

-- name: NodeHoldingInstance :one
-- The node holding @instance_uuid as its instance (a CreateAllocation that
-- inserted nothing), with its tenancy (the 409 names it only to a caller
-- who may see it), and whether an allocation has that uuid (then the 409
-- is Ironic's AllocationAlreadyExists, as the insert itself would say).
SELECT n.uuid, n.owner, n.lessee,
       EXISTS (SELECT 1 FROM allocations a WHERE a.uuid = @instance_uuid::uuid) AS allocated
  FROM nodes n WHERE n.instance_uuid = @instance_uuid::uuid;

-- name: BackfillNode :exec
-- Backfill: an already-deployed node, locked by the caller, is recorded as
-- holding the allocation (metalloc_hold, as every reservation does).
SELECT metalloc_hold(@node_id::bigint, @allocation_id::bigint, @instance_uuid::uuid, @traits::text[]);

-- name: NodeIDByUUID :one
SELECT id FROM nodes WHERE uuid = @uuid;

-- name: NodeIDByName :one
SELECT id FROM nodes WHERE name = @name;

-- name: ResolveNodes :many
-- candidate_nodes: names and uuids to node uuids, among the nodes owned by
-- or leased to @project (every node when NULL).
SELECT uuid, name FROM nodes
 WHERE (uuid = ANY(@uuids::uuid[]) OR name = ANY(@names::text[]))
   AND metalloc_node_in_scope(uuid, owner, lessee, NULL, sqlc.narg(project)::text);

-- name: NodeTenancy :one
-- A node's owner and lessee, for the access rules of
-- /v1/nodes/{ident}/allocation (keystone mode only).
SELECT owner, lessee FROM nodes WHERE id = @id;

-- name: SequenceEvents :one
-- Numbers the committed events that have none yet
-- (metalloc_sequence_allocation_events); returns how many.
SELECT metalloc_sequence_allocation_events()::bigint AS numbered;

-- name: EventsAfter :many
-- The numbered allocation events after seq @after, in order.
SELECT e.seq::bigint AS seq, e.at, e.kind, e.allocation_uuid, e.name, e.state,
       e.resource_class, e.owner, e.node_uuid, e.last_error
  FROM allocation_events e
 WHERE e.seq > @after::bigint
 ORDER BY e.seq
 LIMIT @max_rows;

-- name: EventsHead :one
-- The last seq given (where a stream without Last-Event-ID starts) and the
-- newest seq pruned.
SELECT last_seq, pruned_seq FROM allocation_events_meta;

-- name: PruneEvents :one
-- Deletes events older than max_age or beyond the max_rows newest
-- (metalloc_prune_allocation_events); returns how many.
SELECT metalloc_prune_allocation_events(make_interval(secs => @max_age_seconds::float8), @max_rows::bigint)::bigint AS deleted;

-- name: AllocatingStats :one
-- The queue for metrics: rows waiting in allocating and the age in seconds
-- of the oldest (0 when none), by the database clock. Reads the partial
-- index allocations_allocating_idx's rows only, whatever the statistics
-- (metalloc_allocating_stats, migrations/00028_fixed_plans.sql).
SELECT s.allocating::bigint AS allocating, s.oldest_seconds::float8 AS oldest_seconds
  FROM metalloc_allocating_stats() s;
