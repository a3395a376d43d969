-- The node mirror's SQL (package ironic). The mirror's writes are the SQL
-- functions metalloc_ironic_mirror and metalloc_ironic_prune
-- (migrations/00025_ironic_mirror.sql); the lease is the one row of
-- ironic_sync_lease.

-- name: DBNow :one
-- The database clock now (not the transaction's start): when a read of
-- Ironic is about to be sent.
SELECT clock_timestamp()::timestamptz AS now;

-- name: MirrorNodes :one
SELECT coalesce(created, 0)::integer AS created, coalesce(updated, 0)::integer AS updated,
       coalesce(stale, 0)::integer AS stale, coalesce(lost, false)::boolean AS lost
  FROM metalloc_ironic_mirror(@nodes::jsonb, sqlc.narg(allocations)::jsonb, @read_at::timestamptz, sqlc.narg(holder)::bigint);

-- name: PruneNodes :one
SELECT coalesce(deleted, 0)::integer AS deleted, coalesce(kept, 0)::integer AS kept,
       coalesce(lost, false)::boolean AS lost
  FROM metalloc_ironic_prune(@before::timestamptz, sqlc.narg(uuids)::uuid[], sqlc.narg(holder)::bigint);

-- name: AcquireLease :one
-- Conductor me takes or keeps the sync lease: when nobody holds it, it
-- holds it already, the holder's last renewal is older than ttl_seconds,
-- or the holder is a dead conductor (metalloc_conductor_alive). A
-- compare-and-set: one conductor wins; no row means another holds it.
UPDATE ironic_sync_lease l
   SET holder = @me::bigint,
       acquired_at = CASE WHEN l.holder IS NOT DISTINCT FROM @me::bigint THEN l.acquired_at ELSE now() END,
       renewed_at = now()
 WHERE l.name = 'nodes'
   AND (l.holder IS NULL OR l.holder = @me::bigint
        OR l.renewed_at < now() - make_interval(secs => @ttl_seconds::float8)
        OR NOT EXISTS (SELECT 1 FROM conductors c
                        WHERE c.id = l.holder
                          AND metalloc_conductor_alive(c.online, c.expires_at)))
RETURNING l.acquired_at;

-- name: ReleaseLease :execrows
UPDATE ironic_sync_lease SET holder = NULL WHERE name = 'nodes' AND holder = @me::bigint;

-- name: StartSync :execrows
UPDATE ironic_sync_lease SET last_sync_started_at = @started::timestamptz, renewed_at = now()
 WHERE name = 'nodes' AND holder = @me::bigint;

-- name: FinishSync :execrows
UPDATE ironic_sync_lease SET last_sync_at = now(), last_sync_nodes = @nodes::integer, last_error = NULL, renewed_at = now()
 WHERE name = 'nodes' AND holder = @me::bigint;

-- name: SyncFailed :exec
UPDATE ironic_sync_lease SET last_error = @error::text WHERE name = 'nodes' AND holder = @me::bigint;

-- name: LeaseStatus :one
SELECT l.holder, c.hostname AS holder_hostname, l.acquired_at, l.renewed_at, l.last_sync_started_at,
       l.last_sync_at, l.last_sync_nodes, l.last_error
  FROM ironic_sync_lease l LEFT JOIN conductors c ON c.id = l.holder
 WHERE l.name = 'nodes';

-- name: MirroredNodeCount :one
SELECT count(*) FROM nodes;

-- name: NodeUUIDByName :one
SELECT uuid FROM nodes WHERE name = @name::text;

-- name: ReconcileNodes :one
-- After a write of the mirror: allocations active in both that Ironic, in
-- that read, shows gone from their node are deleted in metalloc too
-- (metalloc_ironic_reconcile_nodes, migrations/00026_ironic_allocations.sql).
SELECT metalloc_ironic_reconcile_nodes(@uuids::uuid[])::integer AS deallocated;

-- name: AllocationByUUIDKnown :one
-- Whether metalloc has allocation @uuid (the front sends requests for
-- allocations it has not to Ironic).
SELECT EXISTS (SELECT 1 FROM allocations WHERE uuid = @uuid)::boolean;

-- name: AllocationByNameKnown :one
SELECT EXISTS (SELECT 1 FROM allocations WHERE name = @name::text)::boolean;

-- name: NodeAllocationByUUIDKnown :one
-- Whether metalloc holds node @uuid for one of its allocations.
SELECT EXISTS (SELECT 1 FROM nodes WHERE uuid = @uuid AND allocation_id IS NOT NULL)::boolean;

-- name: NodeAllocationByNameKnown :one
SELECT EXISTS (SELECT 1 FROM nodes WHERE name = @name::text AND allocation_id IS NOT NULL)::boolean;
