-- The drivers API (GET /v1/drivers...): which hardware types the live
-- conductors serve, read from the conductors table.

-- name: ActiveHardwareTypes :many
-- Hostnames and registered hardware types of the conductors alive now
-- (metalloc_conductor_alive: online with a heartbeat younger than
-- @alive_seconds), any conductor group: Ironic's
-- get_active_hardware_type_dict.
SELECT c.hostname, c.drivers
  FROM conductors c
 WHERE metalloc_conductor_alive(c.online, c.heartbeat_at, @alive_seconds::float8)
 ORDER BY c.hostname;
