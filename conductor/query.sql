-- name: Register :one
-- Registers (or re-registers after a restart) the conductor named @hostname,
-- alive until @timeout_seconds from now (its heartbeat timeout). Returns no
-- row when a live conductor already holds that hostname
-- (metalloc_conductor_alive). @schema_version is the highest migration the
-- binary knows and @pid its process id (db.Binaries: db sync --contract).
-- A registration clears a drain the row had (a restart ends a drain:
-- Service.drain).
INSERT INTO conductors AS c (hostname, conductor_group, drivers, version, schema_version, pid, online,
                             started_at, heartbeat_at, expires_at)
VALUES (@hostname, @conductor_group, @drivers, @version, @schema_version, @pid, true, now(), now(),
        now() + make_interval(secs => @timeout_seconds::float8))
ON CONFLICT (hostname) DO UPDATE
   SET conductor_group = EXCLUDED.conductor_group, drivers = EXCLUDED.drivers,
       version = EXCLUDED.version, schema_version = EXCLUDED.schema_version, pid = EXCLUDED.pid,
       online = true, started_at = now(),
       heartbeat_at = now(), expires_at = EXCLUDED.expires_at, updated_at = now(),
       drain_requested_at = NULL, drained_at = NULL, drain_released = NULL
 WHERE NOT metalloc_conductor_alive(c.online, c.expires_at)
RETURNING c.id, c.started_at;

-- name: Reclaim :one
-- Registers again the conductor @id, named @hostname, whose previous process
-- is dead by its liveness lock (this session holds the lock now): online,
-- alive until @timeout_seconds from now, whatever the expiry the dead
-- process wrote. No row: the row was pruned or renamed meanwhile. A drain
-- of the dead process ends with it (as at Register).
UPDATE conductors c
   SET conductor_group = @conductor_group, drivers = @drivers, version = @version,
       schema_version = @schema_version, pid = @pid, online = true,
       started_at = now(), heartbeat_at = now(), updated_at = now(),
       drain_requested_at = NULL, drained_at = NULL, drain_released = NULL,
       expires_at = now() + make_interval(secs => @timeout_seconds::float8)
 WHERE c.id = @id AND c.hostname = @hostname
RETURNING c.id, c.started_at;

-- name: TryLivenessLock :one
-- Takes conductor @id's liveness lock (a session-level advisory lock, key
-- (@class, @id)) for this session if no session holds it.
SELECT pg_try_advisory_lock(@class::int4, @id::int4) AS locked;

-- name: TerminateLivenessHolders :one
-- Ends the other sessions holding conductor @id's liveness lock on this
-- database: a process whose expiry passed (paused, partitioned) while its
-- session lives; returns how many were ended.
SELECT count(*) FILTER (WHERE pg_terminate_backend(l.pid))::int AS ended
  FROM pg_catalog.pg_locks l
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
   AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
   AND l.classid::int8 = @class::int8 AND l.objid::int8 = @id::bigint
   AND l.pid <> pg_backend_pid();

-- name: LivenessLocks :many
-- The conductors other than @me alive by their expiry, each with its
-- started_at (which process registered it) and whether a session holds its
-- liveness lock on this database (Service.watchLiveness).
SELECT c.id, c.hostname, c.started_at,
       EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                     WHERE d.datname = current_database())
                  AND l.classid::int8 = @class::int8 AND l.objid::int8 = c.id) AS held
  FROM conductors c
 WHERE c.id <> @me::bigint AND metalloc_conductor_alive(c.online, c.expires_at)
 ORDER BY c.id;

-- name: MarkCrashed :execrows
-- Ends conductor @id's expiry now (dead, for everyone, as a conductor whose
-- heartbeats stopped: online, expired; offline is a clean stop's) because
-- no session holds its liveness lock: compare-and-set on the process seen
-- holding it (@started_at) and on the lock being free still, so that a
-- process that registered again under that hostname, or took its lock
-- back, is not hit.
UPDATE conductors c
   SET expires_at = now(), updated_at = now()
 WHERE c.id = @id AND c.started_at = @started_at AND c.online AND c.expires_at > now()
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                      AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                         WHERE d.datname = current_database())
                      AND l.classid::int8 = @class::int8 AND l.objid::int8 = c.id);

-- name: StartedAt :one
-- When conductor @id's row was last registered (a process checks, after it
-- took its liveness lock back, that no other process registered it since).
SELECT started_at FROM conductors WHERE id = @id;

-- name: Heartbeat :execrows
-- The conductor's heartbeat: alive until @timeout_seconds from now.
UPDATE conductors
   SET heartbeat_at = now(), expires_at = now() + make_interval(secs => @timeout_seconds::float8), online = true
 WHERE id = @id;

-- Drain (Service.drain, RequestDrain; migration 00048).

-- name: DrainRequested :one
-- Whether `metalloc-manage conductor drain` asked conductor @id to drain
-- (read at every heartbeat and when the listener (re)connects, in case its
-- notification was missed).
SELECT (drain_requested_at IS NOT NULL)::bool AS requested FROM conductors WHERE id = @id;

-- name: MarkDrained :exec
-- Conductor @id has drained: it claims nothing and released @released
-- rows (those it had not finished within its shutdown grace).
UPDATE conductors
   SET drained_at = now(), drain_released = @released::bigint
 WHERE id = @id AND drain_requested_at IS NOT NULL;

-- name: DrainTarget :one
-- The conductor named @hostname as `conductor drain` judges it: its id,
-- which process registered it (started_at), whether it is online and
-- alive (metalloc_conductor_alive) and its last heartbeat.
SELECT c.id, c.started_at, c.online, metalloc_conductor_alive(c.online, c.expires_at)::bool AS alive,
       c.heartbeat_at
  FROM conductors c
 WHERE c.hostname = @hostname;

-- name: RequestDrain :execrows
-- Asks conductor @id, registered by the process of @started_at, to drain,
-- if it is still that process and alive; a second request keeps the first
-- one's time. The caller then notifies it (NotifyDrain).
UPDATE conductors c
   SET drain_requested_at = coalesce(c.drain_requested_at, now())
 WHERE c.id = @id AND c.started_at = @started_at AND metalloc_conductor_alive(c.online, c.expires_at);

-- name: NotifyDrain :exec
-- Wakes a conductor's drain at once: @payload is DrainNotifyPayload and
-- its id, on NotifyChannel (@channel), which every conductor listens on.
SELECT pg_notify(@channel::text, @payload::text);

-- name: DrainProgress :one
-- Where conductor @id's drain is: the process registered (started_at: a
-- restart ends the drain), whether it is alive, asked to drain, drained,
-- how many rows it released, and how many allocating rows and groups it
-- holds now.
SELECT c.started_at, metalloc_conductor_alive(c.online, c.expires_at)::bool AS alive,
       (c.drain_requested_at IS NOT NULL)::bool AS requested, (c.drained_at IS NOT NULL)::bool AS drained,
       coalesce(c.drain_released, 0)::bigint AS released,
       ((SELECT count(*) FROM allocations a WHERE a.state = 'allocating' AND a.conductor_affinity = c.id)
        + (SELECT count(*) FROM allocation_groups g WHERE g.state = 'allocating' AND g.conductor_affinity = c.id))::bigint AS held
  FROM conductors c
 WHERE c.id = @id;

-- name: ConductorStates :many
-- Every conductor for `metalloc-manage conductor list`: alive, online,
-- its drain (requested, drained), seconds since its heartbeat, and how
-- many allocating rows and groups it holds.
SELECT c.hostname, c.conductor_group, c.version, c.online,
       metalloc_conductor_alive(c.online, c.expires_at)::bool AS alive,
       (c.drain_requested_at IS NOT NULL)::bool AS drain_requested, (c.drained_at IS NOT NULL)::bool AS drained,
       extract(epoch FROM now() - c.heartbeat_at)::float8 AS heartbeat_age,
       ((SELECT count(*) FROM allocations a WHERE a.state = 'allocating' AND a.conductor_affinity = c.id)
        + (SELECT count(*) FROM allocation_groups g WHERE g.state = 'allocating' AND g.conductor_affinity = c.id))::bigint AS held
  FROM conductors c
 ORDER BY c.hostname;

-- name: GoOffline :exec
UPDATE conductors SET online = false, updated_at = now() WHERE id = @id;

-- Allocation rows from a conductor's point of view (rows.go): owned, dead
-- owners, takeover, release. They return ids: the rows themselves are read
-- by backend.Read (the view allocation_requests). The claims and the
-- outcome writes (reserve, fail) are the reservation backends'
-- (conductor/backend/query.sql), each guarded by conductor_affinity = me
-- AND state = 'allocating'.

-- name: OwnedAllocating :many
-- The ids of a conductor's own unfinished rows, resumed at start-up and
-- after outages (read by backend.Read).
SELECT a.id FROM allocations a
 WHERE a.state = 'allocating' AND a.conductor_affinity = @me::bigint
 ORDER BY a.id;

-- name: DeadOwners :many
-- Conductors other than @me that hold allocating rows and are dead
-- (not metalloc_conductor_alive).
SELECT c.id, c.hostname, c.online, c.heartbeat_at
  FROM conductors c
 WHERE c.id <> @me::bigint
   AND NOT metalloc_conductor_alive(c.online, c.expires_at)
   AND (EXISTS (SELECT 1 FROM allocations a
                 WHERE a.state = 'allocating' AND a.conductor_affinity = c.id)
        OR EXISTS (SELECT 1 FROM allocation_groups g
                    WHERE g.state = 'allocating' AND g.conductor_affinity = c.id))
 ORDER BY c.id;

-- name: AllocatingOf :many
-- The ids of conductor @owner's allocating rows, oldest first.
SELECT a.id FROM allocations a
 WHERE a.state = 'allocating' AND a.conductor_affinity = @owner::bigint
 ORDER BY a.id
 LIMIT @max_rows;

-- name: TakeOver :execrows
-- Compare-and-set takeover of one allocating row from the dead conductor
-- @dead: it becomes @me's only if it still belongs to @dead and @dead is still
-- dead. No row: another conductor won, @dead came back, or the row is locked
-- right now (SKIP LOCKED: a takeover never waits; the next period retries).
UPDATE allocations a
   SET conductor_affinity = @me::bigint, updated_at = now()
 WHERE a.id = (SELECT u.id FROM allocations u
                WHERE u.id = @id AND u.conductor_affinity = @dead::bigint AND u.state = 'allocating'
                  FOR UPDATE SKIP LOCKED)
   AND EXISTS (SELECT 1 FROM conductors c
                WHERE c.id = @dead::bigint
                  AND NOT metalloc_conductor_alive(c.online, c.expires_at));

-- name: ReleaseOwned :execrows
-- A stopping conductor hands its unfinished rows back: unowned again, they
-- wake the other conductors (allocations_notify_release) and are claimed at
-- once.
UPDATE allocations
   SET conductor_affinity = NULL
 WHERE state = 'allocating' AND conductor_affinity = @me::bigint;

-- Allocation groups (package allocgroup) go through the same life cycle,
-- with the same guards.

-- name: ClaimGroups :many
-- Takes up to @batch unowned allocating groups for conductor @me, oldest
-- first, skipping groups another conductor is claiming at the same moment;
-- their ids (read by backend.ReadGroups).
UPDATE allocation_groups g
   SET conductor_affinity = @me::bigint
 WHERE g.id IN (SELECT u.id FROM allocation_groups u
                 WHERE u.state = 'allocating' AND u.conductor_affinity IS NULL
                 ORDER BY u.id
                 LIMIT @batch FOR UPDATE SKIP LOCKED)
RETURNING g.id;

-- name: OwnedGroups :many
-- The ids of a conductor's own unfinished groups, resumed at start-up and
-- after outages.
SELECT g.id FROM allocation_groups g
 WHERE g.state = 'allocating' AND g.conductor_affinity = @me::bigint
 ORDER BY g.id;

-- name: GroupsAllocatingOf :many
SELECT g.id FROM allocation_groups g
 WHERE g.state = 'allocating' AND g.conductor_affinity = @owner::bigint
 ORDER BY g.id
 LIMIT @max_rows;

-- name: TakeOverGroup :execrows
-- TakeOver for one allocating group of the dead conductor @dead.
UPDATE allocation_groups g
   SET conductor_affinity = @me::bigint, updated_at = now()
 WHERE g.id = (SELECT u.id FROM allocation_groups u
                WHERE u.id = @id AND u.conductor_affinity = @dead::bigint AND u.state = 'allocating'
                  FOR UPDATE SKIP LOCKED)
   AND EXISTS (SELECT 1 FROM conductors c
                WHERE c.id = @dead::bigint
                  AND NOT metalloc_conductor_alive(c.online, c.expires_at));

-- name: ReleaseOwnedGroups :execrows
-- ReleaseOwned for groups (allocation_groups_notify_update wakes the others).
UPDATE allocation_groups
   SET conductor_affinity = NULL
 WHERE state = 'allocating' AND conductor_affinity = @me::bigint;

-- name: ConductorByHostname :one
SELECT * FROM conductors WHERE hostname = @hostname;

-- name: TrackerNodesPage :many
-- The resource tracker's full pass reads the nodes in pages of @lim,
-- after node id @after (view tracker_nodes).
SELECT * FROM tracker_nodes WHERE id > @after::bigint ORDER BY id LIMIT @lim;

-- name: TrackerNodesByID :many
-- The nodes of the change log the tracker is mirroring; a deleted one
-- has no row.
SELECT * FROM tracker_nodes WHERE id = ANY(@ids::bigint[]) ORDER BY id;

-- name: NodeChanges :many
-- The oldest @lim entries of the node change log
-- (migrations/00027_placement_first_second.sql).
SELECT seq, node_id, node_uuid FROM placement_node_changes ORDER BY seq LIMIT @lim;

-- name: NodeChangesHead :one
-- The node change log's newest entry (0: the log is empty) and whether a
-- resource tracker is registered (only then do the nodes' triggers log
-- changes). WaitMirrored.
SELECT coalesce((SELECT max(seq) FROM placement_node_changes), 0)::bigint AS last_seq,
       EXISTS (SELECT 1 FROM placement_trackers) AS tracked;

-- name: NodeChangesOldest :one
-- The oldest entry of the node change log up to @upto (0: none is left):
-- the trackers read and delete the log in seq order. WaitMirrored.
SELECT coalesce(min(seq), 0)::bigint FROM placement_node_changes WHERE seq <= @upto::bigint;

-- name: DeleteNodeChanges :exec
-- Deletes the log entries a pass has read (by seq: an entry whose
-- transaction committed after the read keeps its row, whatever its seq).
DELETE FROM placement_node_changes WHERE seq = ANY(@seqs::bigint[]);

-- name: UpsertPlacementSyncedMany :exec
-- UpsertPlacementSynced for many nodes at once.
INSERT INTO placement_synced (node_uuid, fingerprint, synced_at)
SELECT unnest(@node_uuids::uuid[]), unnest(@fingerprints::text[]), now()
ON CONFLICT (node_uuid) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, synced_at = now();

-- name: SyncedOf :many
-- Which of these providers the tracker mirrors (placement_synced).
SELECT node_uuid FROM placement_synced WHERE node_uuid = ANY(@uuids::uuid[]) ORDER BY node_uuid;

-- name: UpsertPlacementSynced :exec
-- Records that node @node_uuid's provider now matches @fingerprint.
INSERT INTO placement_synced (node_uuid, fingerprint, synced_at)
VALUES (@node_uuid, @fingerprint, now())
ON CONFLICT (node_uuid) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, synced_at = now();

-- name: MarkPlacementStale :exec
-- Forgets the fingerprint of provider @node_uuid so that the next sync
-- writes it again (its usage changed: reserved must be recomputed).
UPDATE placement_synced SET fingerprint = '' WHERE node_uuid = @node_uuid;

-- name: DeletePlacementSynced :exec
DELETE FROM placement_synced WHERE node_uuid = @node_uuid;

-- name: OrphanPlacementSynced :many
-- Providers the tracker mirrored for nodes that no longer exist.
SELECT s.node_uuid FROM placement_synced s
 WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.uuid = s.node_uuid)
 ORDER BY s.node_uuid;

-- name: PlacementProviderUUIDs :many
-- Every provider the tracker mirrors or will mirror: synced ones and nodes.
SELECT node_uuid AS uuid FROM placement_synced
UNION
SELECT uuid FROM nodes
ORDER BY 1;

-- name: ClaimsOfProvider :many
SELECT consumer_uuid FROM placement_claims WHERE provider_uuid = @provider_uuid ORDER BY consumer_uuid;

-- name: LeakedPlacementClaims :many
-- Claims older than @min_age_seconds whose consumer is neither an
-- allocating allocation nor an active allocation on that provider's node:
-- their Placement allocations must go (deallocation, node teardown, a
-- conductor that died between its two writes, a failed reservation).
SELECT c.consumer_uuid, c.provider_uuid FROM placement_claims c
 WHERE c.created_at < now() - make_interval(secs => @min_age_seconds::float8)
   AND NOT EXISTS (SELECT 1 FROM allocations a
                    WHERE a.uuid = c.consumer_uuid AND a.state = 'allocating')
   AND NOT EXISTS (SELECT 1 FROM allocations a JOIN nodes n ON n.id = a.node_id
                    WHERE a.uuid = c.consumer_uuid AND a.state = 'active' AND n.uuid = c.provider_uuid)
 ORDER BY c.created_at;

-- name: DeletePlacementClaim :exec
DELETE FROM placement_claims WHERE consumer_uuid = @consumer_uuid AND provider_uuid = @provider_uuid;

-- name: RegisterTracker :exec
-- A running resource tracker (see placement_trackers): while any row
-- exists, node changes NOTIFY metalloc_nodes. Also its heartbeat.
INSERT INTO placement_trackers (id, hostname) VALUES (@id, @hostname)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now();

-- name: ExpireTrackers :exec
DELETE FROM placement_trackers WHERE heartbeat_at < now() - interval '10 minutes';

-- name: UnregisterTracker :exec
DELETE FROM placement_trackers WHERE id = @id;

-- name: AllocationsDeadRows :one
-- Dead row versions in allocations by the statistics collector's count
-- (a second or so behind): reserved and deleted allocations.
SELECT pg_stat_get_dead_tuples('allocations'::regclass)::bigint AS dead;

-- name: VacuumAllocations :exec
-- Clears the dead entries the claim scan walks (Service.housekeep); skips
-- at once if another vacuum of the table is running.
VACUUM (SKIP_LOCKED) allocations;

-- name: PruneConductors :many
-- Deletes the conductors whose last heartbeat is older than
-- @retention_seconds (at least the heartbeat timeout, so they are dead
-- whatever the liveness rule), that own no allocating allocation or group,
-- and have no session open on this database (application_name
-- "metalloc-conductor <hostname>": a paused process keeps its sessions, and
-- could come back; a conductor of that name on another database of the
-- server is another cluster's); returns their hostnames.
DELETE FROM conductors c
 WHERE c.heartbeat_at < now() - make_interval(secs => @retention_seconds::float8)
   AND NOT EXISTS (SELECT 1 FROM allocations a
                    WHERE a.state = 'allocating' AND a.conductor_affinity = c.id)
   AND NOT EXISTS (SELECT 1 FROM allocation_groups g
                    WHERE g.state = 'allocating' AND g.conductor_affinity = c.id)
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity s
                    WHERE s.datname = current_database()
                      AND s.application_name = 'metalloc-conductor ' || c.hostname)
RETURNING c.hostname;

-- name: NodeIDOf :one
SELECT id FROM nodes WHERE uuid = @uuid;

-- name: RelogNodes :exec
-- Puts nodes back into the change log and wakes the trackers: the
-- in-process mirror found their providers held by another transaction.
WITH l AS (
    INSERT INTO placement_node_changes (node_id, node_uuid)
    SELECT unnest(@ids::bigint[]), unnest(@uuids::uuid[])
)
SELECT pg_notify('metalloc_nodes', '');

-- name: ZeroRatioInventories :many
-- FindZeroRatios with Placement on this database: the inventories of
-- mirrored providers (placement_synced rows and nodes) whose
-- allocation_ratio is not a positive finite number, in provider then class
-- order: one statement where the API takes a request per provider.
SELECT rp.uuid AS provider, rc.name AS resource_class
  FROM placement.inventories i
  JOIN placement.resource_providers rp ON rp.id = i.resource_provider_id
  JOIN placement.resource_classes rc ON rc.id = i.resource_class_id
 WHERE NOT (i.allocation_ratio > 0 AND i.allocation_ratio < 'Infinity'::float8)
   AND (EXISTS (SELECT 1 FROM placement_synced s WHERE s.node_uuid = rp.uuid)
        OR EXISTS (SELECT 1 FROM nodes n WHERE n.uuid = rp.uuid))
 ORDER BY rp.uuid, rc.name;

-- name: ClaimDueLeases :many
-- Leases (package lease) whose next move is due by the database clock:
-- pending ones at start_time, active ones at end_time or
-- notice_seconds before it (lease.ending, not sent yet). Each becomes
-- the conductor's (conductor_affinity) when unowned, already its, or owned by a
-- dead conductor (metalloc_conductor_alive: the takeover of a conductor
-- that died between its claim and the move), in one statement with FOR
-- UPDATE SKIP LOCKED: conductors racing never wait for each other, and the
-- move itself is a compare-and-set on this affinity (StartLease, EndLease,
-- NoticeLeaseEnding).
UPDATE leases l SET conductor_affinity = @me::bigint
  FROM (SELECT x.id, x.conductor_affinity AS was
          FROM leases x
          LEFT JOIN conductors c ON c.id = x.conductor_affinity
         WHERE ((x.state = 'pending' AND x.start_time <= now())
                OR (x.state = 'active' AND (x.end_time <= now()
                    OR (x.ending_noticed_at IS NULL
                        AND x.end_time <= now() + make_interval(secs => @notice_seconds::float8)))))
           AND (x.conductor_affinity IS NULL OR x.conductor_affinity = @me::bigint
                OR c.id IS NULL OR NOT metalloc_conductor_alive(c.online, c.expires_at))
         ORDER BY x.state, x.id -- 'active' first: ends free the nodes of starts due with them
         LIMIT @batch::integer
           FOR UPDATE OF x SKIP LOCKED) d
 WHERE l.id = d.id
RETURNING l.id, l.uuid, l.state, (d.was IS NOT NULL AND d.was <> @me::bigint)::boolean AS taken_over;

-- name: StartLease :one
-- pending -> active at start_time, only while the conductor owns the lease (the
-- compare-and-set: a conductor that lost it changes nothing); lateness is
-- how late (seconds, by the database clock at this statement) it starts.
UPDATE leases SET state = 'active', status_reason = NULL, updated_at = now()
 WHERE leases.id = @lease_id::bigint AND conductor_affinity = @me::bigint AND state = 'pending' AND start_time <= now()
RETURNING uuid, name, project_id, on_start, start_time, end_time,
          (SELECT r.resource_class FROM lease_reservations r WHERE r.lease_id = leases.id
            ORDER BY r.id LIMIT 1)::text AS resource_class,
          extract(epoch FROM clock_timestamp() - start_time)::float8 AS lateness;

-- name: LeaseNodesForUpdate :many
-- The lease's booked nodes, row-locked in id order (the lock order of
-- every node change), with whether each is free (metalloc_node_free) and
-- its request's resource class.
SELECT n.id, n.uuid, coalesce(n.name, '')::text AS name, r.resource_class,
       metalloc_node_free(n.provision_state, n.maintenance, n.power_state,
                          n.instance_uuid, n.allocation_id) AS free
  FROM lease_nodes ln
  JOIN nodes n ON n.id = ln.node_id
  JOIN lease_reservations r ON r.id = ln.reservation_id
 WHERE ln.lease_id = @lease_id
 ORDER BY n.id
   FOR UPDATE OF n;

-- name: InsertLeaseAllocations :one
-- on_start allocate: one active allocation per node of node_ids (locked
-- and free: LeaseNodesForUpdate), owned by the lease's project, holding
-- its node (metalloc_hold), extra naming the lease.
WITH m AS (
    INSERT INTO allocations (uuid, resource_class, extra, owner, state, node_id, conductor_affinity)
    SELECT gen_random_uuid(), (@resource_classes::text[])[n.ord], jsonb_build_object('lease_uuid', @lease_uuid::uuid),
           @owner::text, 'active', n.nid, @me::bigint
      FROM unnest(@node_ids::bigint[]) WITH ORDINALITY n (nid, ord)
     ORDER BY n.ord
    RETURNING allocations.id, allocations.uuid, allocations.node_id
), h AS (
    SELECT metalloc_hold(m.node_id, m.id, m.uuid, '{}'::text[]) FROM m
)
SELECT (SELECT count(*) FROM h)::integer AS held;

-- name: SetLeaseLessee :exec
-- on_start lessee: the nodes' lessee becomes the project, so that its own
-- on-demand allocations may take them (metalloc_node_on_demand).
UPDATE nodes SET lessee = @project::text, updated_at = now() WHERE id = ANY(@node_ids::bigint[]);

-- name: SetLeaseStatus :exec
UPDATE leases SET status_reason = sqlc.narg(reason)::text WHERE id = @lease_id::bigint;

-- name: EndLease :one
-- active -> ended at end_time, only while the conductor owns the lease; its rows
-- stop blocking (released). lateness: as StartLease's, from end_time.
WITH l AS (
    UPDATE leases SET state = 'ended', updated_at = now()
     WHERE leases.id = @lease_id::bigint AND conductor_affinity = @me::bigint AND state = 'active' AND end_time <= now()
    RETURNING id, uuid, name, project_id, on_start, end_time
), r AS (
    UPDATE lease_nodes SET released = true FROM l WHERE lease_nodes.lease_id = l.id
)
SELECT l.uuid, l.name, l.project_id, l.on_start, l.end_time,
       (SELECT r.resource_class FROM lease_reservations r WHERE r.lease_id = l.id
         ORDER BY r.id LIMIT 1)::text AS resource_class,
       extract(epoch FROM clock_timestamp() - l.end_time)::float8 AS lateness
  FROM l;

-- name: LeaseProjectAllocations :many
-- The allocations of the project on the nodes (locked by the caller): the
-- lease's own (on_start allocate) and those the project made on its
-- nodes while it was their lessee.
SELECT a.id FROM nodes n JOIN allocations a ON a.id = n.allocation_id
 WHERE n.id = ANY(@node_ids::bigint[]) AND a.owner = @project::text
 ORDER BY n.id;

-- name: DeallocateLease :exec
SELECT metalloc_deallocate(@allocation_id::bigint);

-- name: ClearLeaseLessee :exec
UPDATE nodes SET lessee = NULL, updated_at = now()
 WHERE id = ANY(@node_ids::bigint[]) AND lessee = @project::text;

-- name: NoticeLeaseEnding :one
-- lease.ending, once per lease, only while the conductor owns it.
UPDATE leases SET ending_noticed_at = now()
 WHERE leases.id = @lease_id::bigint AND conductor_affinity = @me::bigint AND state = 'active' AND ending_noticed_at IS NULL
RETURNING uuid, name, project_id, state, end_time,
          (SELECT r.resource_class FROM lease_reservations r WHERE r.lease_id = leases.id
            ORDER BY r.id LIMIT 1)::text AS resource_class;

-- name: InsertLeaseEvent :exec
-- A lease event on the allocation event log (kinds lease.start, lease.end,
-- lease.ending: migration 00050), woken as the allocation triggers do
-- (payload: the lease's uuid, a space, its state).
WITH e AS (
    INSERT INTO allocation_events (kind, allocation_uuid, name, state, resource_class, owner, last_error)
    VALUES (@kind::text, @lease_uuid::uuid, sqlc.narg(name)::text, @state::text, @resource_class::text,
            @project::text, sqlc.narg(reason)::text)
)
SELECT pg_notify('metalloc_allocation_events', @payload::text);

-- name: OwnedLease :one
-- Lease @lease_id while conductor @me owns it (ClaimDueLeases), with
-- whether its end is due: the part of a move made in Ironic runs before
-- the move's transaction (leases_backend.go) and reads the lease with it.
SELECT uuid, project_id, on_start, state, (end_time <= now())::boolean AS end_due
  FROM leases
 WHERE id = @lease_id::bigint AND conductor_affinity = @me::bigint;

-- name: LeaseAllocationsWithoutNode :many
-- The lease's own allocations (extra lease_uuid, owned by its project)
-- that hold no node: made through a backend, one it failed (e.g. Ironic
-- refused the node) or not yet settled. The end deletes them too.
SELECT a.id FROM allocations a
 WHERE a.extra->>'lease_uuid' = @lease_uuid::text AND a.owner = @project::text AND a.node_id IS NULL
 ORDER BY a.id;

-- name: LeaseNodeUUIDs :many
-- The lease's booked nodes (uuid, name), in id order, not locked: what a
-- move changes in Ironic before its transaction.
SELECT n.uuid, coalesce(n.name, '')::text AS name
  FROM lease_nodes ln
  JOIN nodes n ON n.id = ln.node_id
 WHERE ln.lease_id = @lease_id::bigint
 ORDER BY n.id;

-- name: InsertLeaseAllocationRequests :execrows
-- on_start allocate through the backend (in front of Ironic, the placement
-- backend): one allocating, unowned allocation per node of node_uuids,
-- that node its only candidate, owned by the lease's project (the nodes'
-- lessee: SetLeaseLessee), extra naming the lease. The conductors claim
-- them as any other (allocations_notify_insert wakes them): made in
-- Ironic through the journal, claimed in Placement.
INSERT INTO allocations (uuid, resource_class, candidate_nodes, extra, owner, state)
SELECT gen_random_uuid(), (@resource_classes::text[])[n.ord], ARRAY[n.node_uuid],
       jsonb_build_object('lease_uuid', @lease_uuid::uuid), @owner::text, 'allocating'
  FROM unnest(@node_uuids::uuid[]) WITH ORDINALITY n (node_uuid, ord)
 ORDER BY n.ord;

-- name: FailLease :one
-- active -> error at end_time, only while the conductor owns the lease:
-- Ironic refused to undeploy a node, or did not make it available in
-- time; the reason says which and why. Nothing else changes (the nodes
-- keep their allocations and lessee for an operator to act on).
-- lateness: as EndLease's.
UPDATE leases SET state = 'error', status_reason = @reason::text, updated_at = now()
 WHERE leases.id = @lease_id::bigint AND conductor_affinity = @me::bigint AND state = 'active' AND end_time <= now()
RETURNING uuid, name, project_id,
          (SELECT r.resource_class FROM lease_reservations r WHERE r.lease_id = leases.id
            ORDER BY r.id LIMIT 1)::text AS resource_class,
          extract(epoch FROM clock_timestamp() - end_time)::float8 AS lateness;

-- name: LeasesToRepair :many
-- Pending leases whose booked nodes a conductor checks (lease.Repair,
-- conductor/leases_replace.go): those with a reservable node in
-- maintenance (index nodes_reservable_maintenance_idx), however far their
-- start, unless already flagged (degraded_reason); and those starting
-- within @ahead_seconds that are flagged (retried until the start), have
-- a node in maintenance, or have fewer rows than they ask for (a node
-- deleted under them). At most @batch, the earliest start first, after
-- (@after_start, @after_id) (the last of the previous page; a flagged
-- lease stays found, so the pages must move on). No locks: Repair locks
-- the lease and checks it afresh.
SELECT x.id, x.uuid, x.start_time FROM leases x
 WHERE x.id IN (SELECT l.id FROM nodes n
                  JOIN lease_nodes ln ON ln.node_id = n.id AND NOT ln.released
                  JOIN leases l ON l.id = ln.lease_id
                 WHERE n.maintenance AND n.reservable AND l.state = 'pending' AND l.degraded_reason IS NULL
                UNION
                SELECT l.id FROM leases l
                 WHERE l.state = 'pending'
                   AND l.start_time <= now() + make_interval(secs => @ahead_seconds::float8)
                   AND (l.degraded_reason IS NOT NULL
                        OR EXISTS (SELECT 1 FROM lease_nodes ln JOIN nodes n ON n.id = ln.node_id
                                    WHERE ln.lease_id = l.id AND NOT ln.released AND n.maintenance)
                        OR (SELECT coalesce(sum(r.count), 0) FROM lease_reservations r WHERE r.lease_id = l.id)
                           > (SELECT count(*) FROM lease_nodes ln WHERE ln.lease_id = l.id AND NOT ln.released)))
   AND (x.start_time, x.id) > (@after_start::timestamptz, @after_id::bigint)
 ORDER BY x.start_time, x.id
 LIMIT @batch::integer;

-- name: LeaseNodesAwaitingEnd :one
-- How many of lease @lease_id's nodes another lease still books although
-- its end_time has come (active: its end is not made yet), while the
-- lease's own start_time is less than @grace_seconds old: back-to-back
-- leases share a node at one second, and the start of the second waits
-- for the end of the first (leases_handover.go).
SELECT count(*)::int AS held FROM lease_nodes ln
  JOIN leases l ON l.id = ln.lease_id
  JOIN lease_nodes o ON o.node_id = ln.node_id AND o.lease_id <> ln.lease_id AND NOT o.released
  JOIN leases ol ON ol.id = o.lease_id AND ol.state = 'active' AND ol.end_time <= now()
 WHERE ln.lease_id = @lease_id::bigint AND NOT ln.released
   AND now() < l.start_time + make_interval(secs => @grace_seconds::float8);

-- name: LeasesWithRefusedNodes :many
-- Active on_start allocate leases with an allocation of their own in
-- error (extra lease_uuid, owned by the project; the partial index
-- allocations_lease_error_idx, a handful of rows) that
-- conductor/leases_refused.go acts on: one marked with its replacement
-- (extra lease_replaced_by: its lessee and allocation are due), or one
-- not marked whose node the lease still books, within @window_seconds of
-- the start (a flagged lease is retried until then). At most @batch, in id
-- order. No locks: RefusedLeaseAllocations locks the lease.
SELECT l.id, l.uuid FROM leases l
 WHERE l.state = 'active' AND l.on_start = 'allocate'
   AND EXISTS (SELECT 1 FROM allocations a
                WHERE a.state = 'error' AND a.extra->>'lease_uuid' IS NOT NULL
                  AND a.extra->>'lease_uuid' = l.uuid::text AND a.owner = l.project_id
                  AND (a.extra->>'lease_replaced_by' IS NOT NULL
                       OR (l.start_time > now() - make_interval(secs => @window_seconds::float8)
                           AND EXISTS (SELECT 1 FROM lease_nodes ln JOIN nodes n ON n.id = ln.node_id
                                        WHERE ln.lease_id = l.id AND NOT ln.released
                                          AND n.uuid = a.candidate_nodes[1]))))
 ORDER BY l.id
 LIMIT @batch::integer;

-- name: RefusedLeaseAllocations :many
-- Lease @lease_id's own allocations in error (as LeasesWithRefusedNodes),
-- each with the node that was its only candidate and the replacement it
-- is marked with (extra lease_replaced_by; empty before), while the lease is
-- active and on_start allocate; the lease's row is locked (FOR UPDATE):
-- conductor/leases_refused.go makes its steps under it.
SELECT a.id, a.uuid, n.id AS node_id, n.uuid AS node_uuid, coalesce(n.name, '')::text AS node_name,
       coalesce(a.extra->>'lease_replaced_by', '')::text AS replaced_by, l.uuid AS lease_uuid, l.project_id
  FROM leases l
  JOIN allocations a ON a.state = 'error' AND a.extra->>'lease_uuid' IS NOT NULL
                    AND a.extra->>'lease_uuid' = l.uuid::text AND a.owner = l.project_id
  JOIN nodes n ON n.uuid = a.candidate_nodes[1]
 WHERE l.id = @lease_id::bigint AND l.state = 'active' AND l.on_start = 'allocate'
 ORDER BY a.id
   FOR UPDATE OF l;

-- name: MarkLeaseAllocationReplaced :exec
-- Marks a lease's refused allocation with its node's replacement (extra
-- lease_replaced_by), in the transaction that books the replacement.
UPDATE allocations SET extra = extra || jsonb_build_object('lease_replaced_by', @node_uuid::uuid), updated_at = now()
 WHERE id = @id::bigint AND state = 'error';
