-- name: CreateAllocation :one
-- Inserts the row and its traits in one statement. A new row is allocating
-- and unclaimed (the allocations_notify trigger wakes the conductors at
-- commit), or, for a backfill, active on @node_id at once. No row (nothing
-- inserted) when a node other than @node_id already holds @uuid as its
-- instance_uuid (Ironic's "already associated" 409: NodeHoldingInstance
-- names it).
WITH a AS (
    INSERT INTO allocations (uuid, name, resource_class, candidate_nodes, extra, owner, state, node_id)
    SELECT @uuid, @name, @resource_class, @candidate_nodes, @extra, @owner, @state, sqlc.narg(node_id)
     WHERE NOT EXISTS (SELECT 1 FROM nodes h
                        WHERE h.instance_uuid = @uuid
                          AND h.id IS DISTINCT FROM sqlc.narg(node_id)::bigint
                        OFFSET 0)
    RETURNING *
), t AS (
    INSERT INTO allocation_traits (allocation_id, trait)
    SELECT a.id, unnest(@traits::text[]) FROM a
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
)
SELECT * FROM a;

-- name: GetAllocation :one
SELECT sqlc.embed(a), n.uuid AS node_uuid,
       (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
          FROM allocation_traits t WHERE t.allocation_id = a.id)::text[] AS traits,
       g.uuid AS allocation_group_uuid
  FROM allocations a LEFT JOIN nodes n ON n.id = a.node_id
  LEFT JOIN allocation_groups g ON g.id = a.group_id
 WHERE a.id = @id;

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
SELECT uuid FROM nodes WHERE instance_uuid = @instance_uuid;

-- name: BackfillNode :exec
-- Backfill: an already-deployed node, locked by the caller, is recorded as
-- holding the allocation (metalloc_hold, as every reservation does).
SELECT metalloc_hold(@node_id::bigint, @allocation_id::bigint, @instance_uuid::uuid, @traits::text[]);

-- name: Reserve :one
-- One reservation attempt (see metalloc_reserve in the migrations): no row
-- when no unlocked node fits, reserved = false when the allocation is no
-- longer @me's.
SELECT r.node_id::bigint AS node_id, r.node_uuid::uuid AS node_uuid, r.reserved::boolean AS reserved
  FROM metalloc_reserve(@allocation_id::bigint, @me::bigint, @resource_class::text, @traits::text[],
                        sqlc.narg(candidates)::uuid[], sqlc.narg(owner)::text, sqlc.narg(name)::text,
                        @start::bigint) r;

-- name: ClaimReserve :many
-- The fast path (see metalloc_claim_reserve in the migrations): claim up to
-- @batch rows for @me and reserve a node for each that has one free now. Only
-- what the function returns is used: a join back to allocations here would
-- read with this statement's snapshot, older than the function's, and miss
-- rows inserted while it ran. Unreserved rows are read with ClaimedAllocating.
SELECT r.out_id::bigint AS id, r.out_uuid::uuid AS uuid,
       r.out_created_at::timestamptz AS created_at, r.out_reserved::boolean AS reserved
  FROM metalloc_claim_reserve(@me::bigint, @batch::integer, @starts::bigint[]) r
 ORDER BY 1;

-- name: ClaimReservePlacement :many
-- ClaimReserve for the Placement backend in mode local: the rows it
-- reserves are claimed in Placement too, in the same transaction (see
-- metalloc_claim_reserve_placement in the migrations). Same columns as
-- ClaimReserve.
SELECT r.out_id::bigint AS id, r.out_uuid::uuid AS uuid,
       r.out_created_at::timestamptz AS created_at, r.out_reserved::boolean AS reserved
  FROM metalloc_claim_reserve_placement(@me::bigint, @batch::integer, @starts::bigint[],
                                        @user_id::text, @consumer_type::text) r
 ORDER BY 1;

-- name: ClaimedAllocating :many
-- The given rows, if still allocating and owned by @me (the fast path's
-- unreserved rows, read in a statement of their own).
SELECT a.id, a.uuid, a.name, a.resource_class, a.candidate_nodes, a.owner, a.created_at,
       (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
          FROM allocation_traits t WHERE t.allocation_id = a.id)::text[] AS traits
  FROM allocations a
 WHERE a.id = ANY(@ids::bigint[]) AND a.state = 'allocating' AND a.conductor_affinity = @me::bigint
 ORDER BY a.id;

-- name: NodeIDRange :one
SELECT coalesce(min(id), 0)::bigint AS lo, coalesce(max(id), 0)::bigint AS hi FROM nodes;

-- name: FailAllocation :execrows
-- allocating -> error with a reason, only while @me owns the row.
UPDATE allocations
   SET state = 'error', last_error = @last_error, node_id = NULL, updated_at = now()
 WHERE id = @id AND conductor_affinity = @me::bigint AND state = 'allocating';

-- name: FitStats :one
-- Why nothing fits: how many nodes survive each filter in turn, for
-- last_error (the same predicates as metalloc_pick, in the same order).
WITH rc AS (
    SELECT n.id, n.uuid, n.owner, n.lessee,
           metalloc_node_free(n.provision_state, n.maintenance, n.power_state,
                              n.instance_uuid, n.allocation_id) AS free
      FROM nodes n WHERE n.resource_class = @resource_class::text
), cand AS (
    SELECT rc.id FROM rc
     WHERE rc.free AND metalloc_node_in_scope(rc.uuid, rc.owner, rc.lessee,
                                              sqlc.narg(candidates)::uuid[], sqlc.narg(owner)::text)
)
SELECT (SELECT count(*) FROM rc)::bigint AS with_class,
       (SELECT count(*) FROM rc WHERE rc.free)::bigint AS available,
       (SELECT count(*) FROM cand)::bigint AS candidates,
       (SELECT count(*) FROM cand
         WHERE metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t WHERE t.node_id = cand.id),
                                        @traits::text[]))::bigint AS fitting;

-- name: NodeIDByUUID :one
SELECT id FROM nodes WHERE uuid = @uuid;

-- name: NodeIDByName :one
SELECT id FROM nodes WHERE name = @name;

-- name: ResolveNodes :many
-- candidate_nodes: names and uuids to node uuids.
SELECT uuid, name FROM nodes WHERE uuid = ANY(@uuids::uuid[]) OR name = ANY(@names::text[]);

-- name: FitNodes :many
-- The Placement backend's database filter over Placement's candidates: those
-- of @uuids that could take an allocation right now (metalloc_pick's
-- predicates, without locking). Placement knows nothing of owners and
-- lessees, and its view lags behind node changes the tracker has not
-- mirrored yet.
SELECT n.uuid FROM free_nodes n
 WHERE n.uuid = ANY(@uuids::uuid[]) AND n.resource_class = @resource_class::text
   AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, sqlc.narg(owner)::text)
   AND metalloc_node_has_traits(n.traits, @traits::text[]);

-- name: RecordPlacementClaim :exec
-- The claim intent log: written before PUT /allocations/{consumer}, so that
-- the resource tracker can remove a Placement allocation a conductor left
-- behind (it died, or Placement went away before the clean-up).
INSERT INTO placement_claims (consumer_uuid, provider_uuid)
VALUES (@consumer_uuid, @provider_uuid)
ON CONFLICT (consumer_uuid) DO UPDATE
   SET provider_uuid = EXCLUDED.provider_uuid, created_at = now();

-- name: ForgetPlacementClaim :execrows
-- After DELETE /allocations/{consumer}: the claim is gone. With @provider_uuid
-- set, only if the log still names that provider (another conductor that
-- took the allocation over may have claimed elsewhere since).
DELETE FROM placement_claims
 WHERE consumer_uuid = @consumer_uuid
   AND (sqlc.narg(provider_uuid)::uuid IS NULL OR provider_uuid = sqlc.narg(provider_uuid)::uuid);

-- name: AllocationOwnership :one
-- Who holds an allocation now (after a compare-and-set found it was no
-- longer ours).
SELECT state, conductor_affinity FROM allocations WHERE id = @id;

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
-- index allocations_allocating_idx's rows only.
SELECT count(*)::bigint AS allocating,
       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_seconds
  FROM allocations
 WHERE state = 'allocating';

-- name: PickNode :one
-- Locks @node for the local Placement backend's batch if it is free and fits
-- (metalloc_pick on one candidate, without waiting for a node others hold):
-- a null node_id when it does not.
SELECT p.node_id::bigint AS node_id
  FROM metalloc_pick(@resource_class::text, @traits::text[], ARRAY[@node::uuid], sqlc.narg(owner)::text,
                     NULL, 0) p;

-- name: LockOwnedAllocating :many
-- The given rows still allocating and owned by @me, locked for the local
-- Placement backend's batch (rows another transaction holds are skipped:
-- they are left to the slow path).
SELECT a.id FROM allocations a
 WHERE a.id = ANY(@ids::bigint[]) AND a.state = 'allocating' AND a.conductor_affinity = @me::bigint
   FOR UPDATE OF a SKIP LOCKED;

-- name: InstancesInUse :many
-- Those of @uuids that are already some node's instance_uuid.
SELECT n.instance_uuid::uuid AS instance_uuid FROM nodes n WHERE n.instance_uuid = ANY(@uuids::uuid[]);

-- name: RecordPlacementClaims :exec
-- RecordPlacementClaim for several claims in one statement.
INSERT INTO placement_claims (consumer_uuid, provider_uuid)
SELECT unnest(@consumer_uuids::uuid[]), unnest(@provider_uuids::uuid[])
    ON CONFLICT (consumer_uuid) DO UPDATE
   SET provider_uuid = EXCLUDED.provider_uuid, created_at = now();

-- name: HoldPickedMany :many
-- The local Placement backend's batch (localRound): row k activates
-- allocation @allocation_ids[k] (still allocating and @me's) with node
-- @node_ids[k], which the batch locked (PickFirstFree), and holds the node
-- (metalloc_hold) with the traits @traits[k] (comma-separated: trait names
-- have no commas). Returns the ids of the allocations activated.
WITH i AS (
    SELECT unnest(@node_ids::bigint[]) AS node_id, unnest(@allocation_ids::bigint[]) AS allocation_id,
           unnest(@traits::text[]) AS traits
), a AS (
    UPDATE allocations al
       SET node_id = i.node_id, state = 'active', last_error = NULL, updated_at = now()
      FROM i
     WHERE al.id = i.allocation_id AND al.conductor_affinity = @me::bigint AND al.state = 'allocating'
    RETURNING al.id, al.uuid, i.node_id, i.traits
), h AS (
    SELECT a.id, metalloc_hold(a.node_id, a.id, a.uuid, string_to_array(a.traits, ',')) FROM a
)
SELECT h.id FROM h;

-- name: PickFirstFree :many
-- Locks the first of @nodes, in their order, that is free and fits (the
-- local Placement backend's batch: a selection's chosen node, then its
-- alternates), without waiting for nodes others hold; no row when none.
SELECT n.id AS node_id, n.uuid AS node_uuid
  FROM unnest(@nodes::uuid[]) WITH ORDINALITY c (uuid, ord)
  JOIN free_nodes n ON n.uuid = c.uuid
 WHERE n.resource_class = @resource_class::text
   AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, sqlc.narg(owner)::text)
   AND metalloc_node_has_traits(n.traits, @traits::text[])
 ORDER BY c.ord
 LIMIT 1
   FOR UPDATE OF n SKIP LOCKED;
