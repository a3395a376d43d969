-- +goose Up
-- Kind: contract. It drops metalloc_conductor_alive(boolean, timestamptz,
-- float8), which the queries of binaries built for 00019 call.
-- Liveness written into the conductor's row by the conductor itself
-- (issue 24): registration and every heartbeat set expires_at = now() +
-- the conductor's own conductor.heartbeat_timeout, and a conductor is
-- alive while online AND expires_at > now(), by the database clock. Before,
-- each reader judged the heartbeat's age with its own configured timeout,
-- so an API and a conductor configured differently disagreed about who is
-- alive. A row written without an expiry (an INSERT that names none) is
-- alive for the default timeout, 60 s.
ALTER TABLE conductors ADD COLUMN expires_at timestamptz NOT NULL DEFAULT now() + interval '60 seconds';
UPDATE conductors SET expires_at = heartbeat_at + interval '60 seconds';

DROP FUNCTION metalloc_conductor_alive(boolean, timestamptz, double precision);

-- +goose StatementBegin
-- Whether a conductor is alive: online (not stopped cleanly) and its
-- expiry, written by its last registration or heartbeat, not passed. The
-- one definition, used by registration, the dead-owner list, takeover, the
-- conductors API and its metrics.
CREATE FUNCTION metalloc_conductor_alive(online boolean, expires_at timestamptz)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN online AND expires_at > now();
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION metalloc_conductor_alive(boolean, timestamptz);
-- +goose StatementBegin
CREATE FUNCTION metalloc_conductor_alive(online boolean, heartbeat_at timestamptz, timeout_seconds double precision)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN online AND heartbeat_at > now() - make_interval(secs => timeout_seconds);
-- +goose StatementEnd
ALTER TABLE conductors DROP COLUMN expires_at;
