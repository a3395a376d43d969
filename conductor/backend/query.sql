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
-- last_error (the same predicates as metalloc_pick, in the same order),
-- and why the nodes of the class that are not free are not, each counted
-- once, for the first reason in metalloc_node_free's order that applies:
-- maintenance, an allocation or instance, a provision state other than
-- available, no power state (Ironic allocates only nodes with one).
-- Only the nodes the allocation's owner may see are counted (owned by or
-- leased to it; every node when it has none): last_error says nothing of
-- other projects' nodes. reservable: the available ones kept for leases
-- (metalloc_node_on_demand), which candidates leaves out.
WITH rc AS (
    SELECT n.id, n.uuid, n.owner, n.lessee, n.reservable,
           metalloc_node_free(n.provision_state, n.maintenance, n.power_state,
                              n.instance_uuid, n.allocation_id) AS free,
           CASE WHEN n.maintenance THEN 'maintenance'
                WHEN n.allocation_id IS NOT NULL OR n.instance_uuid IS NOT NULL THEN 'held'
                WHEN n.provision_state IS DISTINCT FROM 'available' THEN 'state'
                WHEN n.power_state IS NULL THEN 'power'
           END AS why
      FROM nodes n
     WHERE n.resource_class = @resource_class::text
       AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, sqlc.narg(owner)::text)
), cand AS (
    SELECT rc.id FROM rc
     WHERE rc.free AND metalloc_node_in_scope(rc.uuid, rc.owner, rc.lessee,
                                              sqlc.narg(candidates)::uuid[], sqlc.narg(owner)::text)
       AND metalloc_node_on_demand(rc.reservable, rc.lessee, sqlc.narg(owner)::text)
)
SELECT (SELECT count(*) FROM rc)::bigint AS with_class,
       (SELECT count(*) FROM rc WHERE rc.free)::bigint AS available,
       (SELECT count(*) FROM rc WHERE rc.why = 'maintenance')::bigint AS in_maintenance,
       (SELECT count(*) FROM rc WHERE rc.why = 'held')::bigint AS held,
       (SELECT count(*) FROM rc WHERE rc.why = 'state')::bigint AS other_state,
       (SELECT count(*) FROM rc WHERE rc.why = 'power')::bigint AS no_power,
       (SELECT count(*) FROM rc WHERE rc.free
          AND NOT metalloc_node_on_demand(rc.reservable, rc.lessee, sqlc.narg(owner)::text))::bigint AS reservable,
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
   AND metalloc_node_on_demand(n.reservable, n.lessee, sqlc.narg(owner)::text)
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
   AND metalloc_node_on_demand(n.reservable, n.lessee, sqlc.narg(owner)::text)
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
   AND metalloc_node_on_demand(n.reservable, n.lessee, sqlc.narg(owner)::text)
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
-- The members, one per node, in @state (active at once; allocating with
-- the Ironic backend, until Ironic has them) and holding their nodes
-- (metalloc_hold), owned by @me, with the group's request and extra. Their
-- uuids are @member_uuids (same order as @node_ids; the placement backend
-- claims them in Placement first), or random when NULL.
WITH g AS (
    SELECT ag.id, ag.resource_class, ag.candidate_nodes, ag.extra, ag.owner, ag.traits
      FROM allocation_groups ag WHERE ag.id = @group_id::bigint
), m AS (
    INSERT INTO allocations (uuid, resource_class, candidate_nodes, extra, owner, state, node_id,
                             conductor_affinity, group_id)
    SELECT coalesce((sqlc.narg(member_uuids)::uuid[])[n.ord], gen_random_uuid()), g.resource_class, g.candidate_nodes, g.extra, g.owner, @state::text, n.nid,
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

-- The Ironic backend (ironic.go): allocations made in Ironic too, with
-- the journal ironic_allocations (migrations/00026_ironic_allocations.sql).

-- name: IronicClaimHold :many
-- Claim up to @batch rows for @me, each holding a free node if one is
-- (metalloc_ironic_claim_hold); node_id 0: none held.
SELECT r.out_id::bigint AS id, coalesce(r.out_node_id, 0)::bigint AS node_id
  FROM metalloc_ironic_claim_hold(@me::bigint, @batch::integer) r
 ORDER BY 1;

-- name: IronicHold :one
-- Hold a node for an owned row (metalloc_ironic_hold).
SELECT h.node_id, h.node_uuid, coalesce(h.lost, false)::boolean AS lost, coalesce(h.blocked, false)::boolean AS blocked
  FROM metalloc_ironic_hold(@id::bigint, @me::bigint, sqlc.narg(name)::text) h;

-- name: IronicIntent :one
-- Journal an allocation about to be sent to Ironic on its held node
-- (metalloc_ironic_intent): the nodes tried, 0 when lost, -1 blocked.
SELECT coalesce(metalloc_ironic_intent(@id::bigint, @me::bigint, @node_id::bigint), 0)::integer AS attempts;

-- name: IronicUnhold :one
-- Let go of a held node, marking it, or fail the row
-- (metalloc_ironic_unhold): 'released', 'failed' or 'lost'.
SELECT metalloc_ironic_unhold(@id::bigint, @me::bigint, sqlc.narg(node_id)::bigint, sqlc.narg(mark)::text,
                              sqlc.narg(error)::text, @keep::boolean)::text AS outcome;

-- name: IronicRequests :many
-- What the Ironic backend sends of owned allocating rows: the request
-- (allocation_requests), extra, the node held and the journal.
SELECT sqlc.embed(r), a.extra, a.node_id, n.uuid AS node_uuid, a.group_id,
       j.state AS journal_state, j.node_uuid AS journal_node, coalesce(j.attempts, 0)::integer AS attempts
  FROM allocations a JOIN allocation_requests r ON r.id = a.id
  LEFT JOIN nodes n ON n.id = a.node_id
  LEFT JOIN ironic_allocations j ON j.uuid = a.uuid
 WHERE a.id = ANY(@ids::bigint[]) AND a.state = 'allocating' AND a.conductor_affinity = @me::bigint
 ORDER BY a.id;

-- name: IronicActivate :one
-- allocating -> active once Ironic's copy is active on the held node, with
-- the journal: 1 activated, 0 lost (not @me's allocating row on that node).
WITH a AS (
    UPDATE allocations
       SET state = 'active', last_error = NULL, updated_at = now()
     WHERE id = @id AND conductor_affinity = @me::bigint AND state = 'allocating' AND node_id = @node_id::bigint
    RETURNING uuid
), j AS (
    UPDATE ironic_allocations j SET state = 'active', last_error = NULL, updated_at = now()
      FROM a WHERE j.uuid = a.uuid
    RETURNING j.uuid
)
SELECT count(*)::integer AS activated FROM a;

-- name: IronicDeletions :many
-- Up to @batch journal rows to delete in Ironic whose turn has come,
-- leased for @lease_seconds (a conductor that dies meanwhile leaves them
-- to the next).
UPDATE ironic_allocations j
   SET retry_at = now() + make_interval(secs => @lease_seconds::float8)
 WHERE j.uuid IN (SELECT d.uuid FROM ironic_allocations d
                   WHERE d.state = 'deleting' AND d.retry_at <= now()
                   ORDER BY d.retry_at
                   LIMIT @batch FOR UPDATE SKIP LOCKED)
RETURNING j.uuid, j.updated_at;

-- name: IronicDeleted :execrows
-- Ironic has no copy any more: a tombstone.
UPDATE ironic_allocations SET state = 'deleted', last_error = NULL, updated_at = now()
 WHERE uuid = @uuid AND state = 'deleting';

-- name: IronicDeleteLater :exec
-- Ironic refused the deletion (or could not be reached): try again after
-- @after_seconds.
UPDATE ironic_allocations
   SET last_error = @error::text, retry_at = now() + make_interval(secs => @after_seconds::float8)
 WHERE uuid = @uuid AND state = 'deleting';

-- name: IronicNextDeletion :one
-- When the next deletion is due (in an hour when none is waiting).
SELECT coalesce(min(retry_at), now() + interval '1 hour')::timestamptz AS due
  FROM ironic_allocations WHERE state = 'deleting';

-- name: PruneIronicTombstones :execrows
DELETE FROM ironic_allocations
 WHERE state = 'deleted' AND updated_at < now() - make_interval(secs => @keep_seconds::float8);

-- name: ReconcileIronicAllocations :one
-- A complete listing of Ironic's allocations applied to the journal
-- (metalloc_ironic_reconcile_allocations).
SELECT coalesce(r.revived, 0)::integer AS revived, coalesce(r.forgotten, 0)::integer AS forgotten
  FROM metalloc_ironic_reconcile_allocations(@listed::uuid[], @at::timestamptz) r;

-- name: IronicJournal :one
-- One journal row (tests, and the group settle).
SELECT uuid, node_uuid, state, attempts, last_error FROM ironic_allocations WHERE uuid = @uuid;

-- name: AdoptGroupMembers :many
-- The members of group @group_id still allocating (held, to be settled in
-- Ironic) become @me's, while @me owns the group; their ids.
UPDATE allocations a SET conductor_affinity = @me::bigint
 WHERE a.group_id = @group_id::bigint AND a.state = 'allocating'
   AND EXISTS (SELECT 1 FROM allocation_groups g
                WHERE g.id = @group_id::bigint AND g.conductor_affinity = @me::bigint AND g.state = 'allocating')
RETURNING a.id;

-- name: DropGroupMembers :one
-- Members refused in Ironic let go (metalloc_ironic_drop_members).
SELECT metalloc_ironic_drop_members(@group_id::bigint, @ids::bigint[], @marks::text[])::integer AS dropped;

-- name: ActivateGroupMembers :many
-- Members active in Ironic become active here, with the journal; their
-- uuids. The group is locked after them (LockOwnedGroup).
WITH a AS (
    UPDATE allocations
       SET state = 'active', last_error = NULL, updated_at = now()
     WHERE id = ANY(@ids::bigint[]) AND group_id = @group_id::bigint AND conductor_affinity = @me::bigint
       AND state = 'allocating' AND node_id IS NOT NULL
    RETURNING uuid
), j AS (
    UPDATE ironic_allocations j SET state = 'active', last_error = NULL, updated_at = now()
      FROM a WHERE j.uuid = a.uuid
    RETURNING j.uuid
)
SELECT a.uuid FROM a;

-- name: HoldGroupDomain :exec
-- The Ironic backend's group reservation holds members without activating
-- the group; the domain of a first placement is recorded now.
UPDATE allocation_groups
   SET domain = CASE WHEN @first::boolean THEN sqlc.narg(domain)::text[] ELSE domain END, updated_at = now()
 WHERE id = @id;

-- name: PendingGroupMembers :one
-- How many members of a group are still allocating.
SELECT count(*)::integer FROM allocations WHERE group_id = @group_id::bigint AND state = 'allocating';
