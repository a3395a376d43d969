-- The statements that move a row a conductor owns (package backend):
-- claim, read what it asks for, reserve, fail, the Placement claim log, the
-- group reservation. Each write is guarded by conductor_affinity = me AND
-- state = 'allocating'. The SQL functions are in db/schema.sql.

-- name: Reserve :one
-- One reservation attempt (metalloc_reserve): no row when no unlocked node
-- fits, reserved = false when the allocation is no longer @me's.
SELECT r.node_id::bigint AS node_id, r.node_uuid::uuid AS node_uuid, r.reserved::boolean AS reserved
  FROM metalloc_reserve(@allocation_id::bigint, @me::bigint, @resource_class::text, @traits::text[],
                        sqlc.narg(candidates)::uuid[], sqlc.narg(owner)::text, sqlc.narg(name)::text) r;

-- name: ClaimReserve :many
-- The fast path (metalloc_claim_reserve): claim up to @batch rows for @me
-- and reserve a node for each that has one free now. Only what the
-- function returns is used: a join back to allocations here would read
-- with this statement's snapshot, older than the function's, and miss rows
-- inserted while it ran. Unreserved rows are read with ClaimedAllocating.
SELECT r.out_id::bigint AS id, r.out_uuid::uuid AS uuid,
       r.out_created_at::timestamptz AS created_at, r.out_reserved::boolean AS reserved
  FROM metalloc_claim_reserve(@me::bigint, @batch::integer) r
 ORDER BY 1;

-- name: ClaimReservePlacement :many
-- ClaimReserve for the placement backend in mode local: the rows it
-- reserves are claimed in Placement too, in the same transaction
-- (metalloc_claim_reserve_placement). Same columns as ClaimReserve.
SELECT r.out_id::bigint AS id, r.out_uuid::uuid AS uuid,
       r.out_created_at::timestamptz AS created_at, r.out_reserved::boolean AS reserved
  FROM metalloc_claim_reserve_placement(@me::bigint, @batch::integer, @user_id::text, @consumer_type::text) r
 ORDER BY 1;

-- name: ClaimedAllocating :many
-- The given rows as a backend takes them (the view allocation_requests),
-- if still allocating and owned by @me: the fast paths' unreserved rows,
-- and the rows a conductor resumes or took over.
SELECT sqlc.embed(r)
  FROM allocations a JOIN allocation_requests r ON r.id = a.id
 WHERE a.id = ANY(@ids::bigint[]) AND a.state = 'allocating' AND a.conductor_affinity = @me::bigint
 ORDER BY a.id;

-- name: FailAllocation :execrows
-- allocating -> error with a reason, only while @me owns the row.
UPDATE allocations
   SET state = 'error', last_error = @last_error, node_id = NULL, updated_at = now()
 WHERE id = @id AND conductor_affinity = @me::bigint AND state = 'allocating';

-- name: FitStats :one
-- Why nothing fits: how many nodes survive each filter in turn, for
-- last_error (the same predicates as metalloc_pick, in the same order).
-- Only the nodes the allocation's owner may see are counted (owned by or
-- leased to it; every node when it has none): last_error says nothing of
-- other projects' nodes.
WITH rc AS (
    SELECT n.id, n.uuid, n.owner, n.lessee,
           metalloc_node_free(n.provision_state, n.maintenance, n.power_state,
                              n.instance_uuid, n.allocation_id) AS free
      FROM nodes n
     WHERE n.resource_class = @resource_class::text
       AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, sqlc.narg(owner)::text)
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

-- name: ClaimAllocations :many
-- Takes up to @batch unowned allocating rows for conductor @me, oldest
-- first, skipping rows another conductor is claiming at the same moment,
-- without reserving (the placement backend, and a fast path that failed as
-- a whole). The rows are read through allocation_requests after the update
-- (its snapshot has them: the claim only changes conductor_affinity).
WITH c AS (
    UPDATE allocations a
       SET conductor_affinity = @me::bigint
     WHERE a.id IN (SELECT u.id FROM allocations u
                     WHERE u.state = 'allocating' AND u.conductor_affinity IS NULL
                     ORDER BY u.id
                     LIMIT @batch FOR UPDATE SKIP LOCKED)
    RETURNING a.id
)
SELECT sqlc.embed(r) FROM c JOIN allocation_requests r ON r.id = c.id
 ORDER BY c.id;

-- name: ClaimedGroups :many
-- The given allocation groups as the group reservation takes them, if
-- still allocating and owned by @me (claimed, resumed or taken over by the
-- conductor).
SELECT g.id, g.uuid, g.count, g.resource_class, g.traits, g.candidate_nodes, g.owner, g.rule, g.rule_level,
       g.domain, g.created_at
  FROM allocation_groups g
 WHERE g.id = ANY(@ids::bigint[]) AND g.state = 'allocating' AND g.conductor_affinity = @me::bigint
 ORDER BY g.id;

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
