-- +goose Up
-- Kind: expand. A new table, a kinds table and two defaulted columns of
-- conductors that binaries built for 00046 neither read nor write.
-- What rolling upgrades need (issue 41; docs/operations.md, "Upgrading").
--
-- schema_migration_kinds: the kind (expand or contract) of every applied
-- migration, written by `metalloc-manage db sync` from the migrations'
-- "-- Kind:" lines. A binary on a database newer than itself reads the
-- kinds of the migrations it does not know here: it runs on when they are
-- all expand (package db, CheckSchema). A version without a row counts as
-- contract.
CREATE TABLE schema_migration_kinds (
    version bigint PRIMARY KEY,
    kind    text   NOT NULL CHECK (kind IN ('expand', 'contract'))
);

-- api_servers: the live metalloc-api and metalloc-placement processes,
-- each registered at start, heartbeating every 5 seconds and deleted at a
-- clean stop; a row whose heartbeat is older than three heartbeats is a
-- process gone (killed), pruned later. schema_version is the highest
-- migration the process's binary knows: `db sync --contract` refuses while
-- a live process (here or in conductors) knows less than its target.
CREATE TABLE api_servers (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hostname       text        NOT NULL,
    pid            integer     NOT NULL,
    service        text        NOT NULL CHECK (service IN ('api', 'placement')),
    version        text        NOT NULL DEFAULT '',
    schema_version bigint      NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT now(),
    heartbeat_at   timestamptz NOT NULL DEFAULT now()
);

-- A conductor's process id and the highest migration its binary knows,
-- written at registration. 0 for a conductor registered by a binary built
-- before this migration (it knows less than any contract's target).
ALTER TABLE conductors ADD COLUMN schema_version bigint NOT NULL DEFAULT 0,
                       ADD COLUMN pid integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE conductors DROP COLUMN pid, DROP COLUMN schema_version;
DROP TABLE api_servers;
DROP TABLE schema_migration_kinds;
