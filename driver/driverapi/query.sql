-- The drivers API (GET /v1/drivers...): which hardware types the live
-- conductors serve, read from the conductors table.

-- name: ActiveHardwareTypes :many
-- Hostnames and registered hardware types of the conductors alive now
-- (metalloc_conductor_alive: online, its expiry not passed), any conductor
-- group: Ironic's get_active_hardware_type_dict.
SELECT c.hostname, c.drivers
  FROM conductors c
 WHERE metalloc_conductor_alive(c.online, c.expires_at)
 ORDER BY c.hostname;
