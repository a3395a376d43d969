-- name: Register :one
-- Registers (or re-registers after a restart) the conductor named @hostname.
-- Returns no row when a live conductor already holds that hostname: online
-- with a heartbeat younger than @alive_seconds.
INSERT INTO conductors AS c (hostname, conductor_group, drivers, version, online, started_at, heartbeat_at)
VALUES (@hostname, @conductor_group, @drivers, @version, true, now(), now())
ON CONFLICT (hostname) DO UPDATE
   SET conductor_group = EXCLUDED.conductor_group, drivers = EXCLUDED.drivers,
       version = EXCLUDED.version, online = true, started_at = now(),
       heartbeat_at = now(), updated_at = now()
 WHERE NOT (c.online AND c.heartbeat_at > now() - make_interval(secs => @alive_seconds::float8))
RETURNING c.id;

-- name: Heartbeat :execrows
UPDATE conductors SET heartbeat_at = now(), online = true WHERE id = @id;

-- name: GoOffline :exec
UPDATE conductors SET online = false, updated_at = now() WHERE id = @id;

-- name: ConductorByHostname :one
SELECT * FROM conductors WHERE hostname = @hostname;
