-- The conductors API (GET /v1/conductors): reads of the conductors table,
-- liveness through metalloc_conductor_alive, the one definition of alive.

-- name: ConductorDoc :one
-- The conductor named @hostname as GET /v1/conductors/{hostname} shows it,
-- online or not (as Ironic's API does). alive: online and its expiry (written by
-- the conductor: its heartbeat plus its heartbeat timeout) not passed, by the
-- database clock. updated_at: the last
-- time the row was touched (heartbeat, registration, going offline), which is
-- what Ironic's conductor updated_at records.
SELECT c.id, c.hostname, c.conductor_group, c.drivers, c.created_at,
       greatest(c.heartbeat_at, c.updated_at)::timestamptz AS updated_at,
       metalloc_conductor_alive(c.online, c.expires_at)::bool AS alive
  FROM conductors c
 WHERE c.hostname = @hostname;

-- name: ListConductors :many
-- One page (@max_rows) of GET /v1/conductors in (@sort_key, id) order,
-- descending when @descending, strictly after the conductor with id
-- @marker_id (0: from the start); columns as ConductorDoc. @sort_key is one
-- of id, hostname, conductor_group, version, online, created_at, updated_at
-- (anything else sorts by id). The sort value goes into one of three typed
-- slots, the unused ones are constant, and no slot is ever NULL, so one row
-- comparison pages through every order without NULL rules.
WITH keyed AS (
    SELECT c.id, c.hostname, c.conductor_group, c.drivers, c.created_at,
           greatest(c.heartbeat_at, c.updated_at) AS touched_at,
           metalloc_conductor_alive(c.online, c.expires_at) AS alive,
           coalesce(CASE @sort_key::text WHEN 'hostname' THEN c.hostname
                                         WHEN 'conductor_group' THEN c.conductor_group
                                         WHEN 'version' THEN c.version END, '') AS k_text,
           coalesce(CASE @sort_key::text WHEN 'created_at' THEN c.created_at
                                         WHEN 'updated_at' THEN greatest(c.heartbeat_at, c.updated_at) END,
                    'epoch'::timestamptz) AS k_time,
           (@sort_key::text = 'online' AND c.online) AS k_bool
      FROM conductors c
)
SELECT k.id, k.hostname, k.conductor_group, k.drivers, k.created_at,
       k.touched_at::timestamptz AS updated_at, k.alive::bool AS alive
  FROM keyed k
  LEFT JOIN keyed m ON m.id = @marker_id::bigint
 WHERE m.id IS NULL
    OR (NOT @descending::bool AND (k.k_text, k.k_time, k.k_bool, k.id) > (m.k_text, m.k_time, m.k_bool, m.id))
    OR (@descending::bool AND (k.k_text, k.k_time, k.k_bool, k.id) < (m.k_text, m.k_time, m.k_bool, m.id))
 ORDER BY CASE WHEN NOT @descending::bool THEN k.k_text END ASC,
          CASE WHEN NOT @descending::bool THEN k.k_time END ASC,
          CASE WHEN NOT @descending::bool THEN k.k_bool END ASC,
          CASE WHEN NOT @descending::bool THEN k.id END ASC,
          k.k_text DESC, k.k_time DESC, k.k_bool DESC, k.id DESC
 LIMIT @max_rows::int;

-- name: ConductorHeartbeats :many
-- Online conductors for metrics: hostname, whether alive (as ConductorDoc)
-- and seconds since the last heartbeat by the database clock.
SELECT c.hostname,
       metalloc_conductor_alive(c.online, c.expires_at)::bool AS alive,
       extract(epoch FROM now() - c.heartbeat_at)::float8 AS age_seconds
  FROM conductors c
 WHERE c.online
 ORDER BY c.hostname;

-- name: ConductorDrains :many
-- The conductors asked to drain (`metalloc-manage conductor drain`,
-- migration 00048), for the operator page: drained once the conductor
-- has handed its rows over and idles.
SELECT c.hostname, (c.drained_at IS NOT NULL)::bool AS drained
  FROM conductors c
 WHERE c.drain_requested_at IS NOT NULL
 ORDER BY c.hostname;
