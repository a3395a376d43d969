-- +goose Up
-- Kind: expand. New tables, an extension and a node column with a default:
-- binaries built for the previous migration never read or write them.
-- Leases (issue 43, package lease): reservable nodes booked by a project
-- for a future window [start_time, end_time), admitted without
-- overbooking by the database itself.
--
-- btree_gist gives GiST the = operator on bigint, which the exclusion
-- constraint of lease_nodes needs (node_id WITH =, during WITH &&). It is
-- a trusted extension (PostgreSQL 13 and later): a role that is not a
-- superuser may create it in a database it has CREATE on (the database's
-- owner has); a role without that privilege gets "permission denied to
-- create extension", and a superuser must run this statement first (it is
-- then a no-op here). See docs/leases.md.
CREATE EXTENSION IF NOT EXISTS btree_gist;

-- A reservable node is in the pool leases take from (Blazar's
-- "freepool"); the others are on-demand only.
ALTER TABLE nodes ADD COLUMN reservable boolean NOT NULL DEFAULT false;

CREATE TABLE leases (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid uuid NOT NULL UNIQUE,
    -- unique when set, as allocations' names.
    name text UNIQUE,
    -- the owner: the project the nodes are booked for.
    project_id text NOT NULL,
    -- UTC, whole seconds; the window is [start_time, end_time).
    start_time timestamptz NOT NULL CHECK (start_time = date_trunc('second', start_time)),
    end_time timestamptz NOT NULL CHECK (end_time = date_trunc('second', end_time)),
    state text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'active', 'ended', 'error', 'cancelled')),
    -- what a conductor does at start_time: an allocation group owned by
    -- the project on the nodes (allocate), or the nodes' lessee set to it.
    on_start text NOT NULL DEFAULT 'allocate' CHECK (on_start IN ('allocate', 'lessee')),
    status_reason text,
    -- the conductor that owns the lease's next move (start or end), as
    -- allocations.conductor_affinity: claimed with a compare-and-set,
    -- taken over when that conductor dies (conductor/doc.go).
    conductor_affinity bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz,
    CHECK (start_time < end_time)
);
CREATE INDEX leases_project_idx ON leases (project_id, id);
-- The conductors' scans: leases to start, leases to end.
CREATE INDEX leases_pending_start_idx ON leases (start_time) WHERE state = 'pending';
CREATE INDEX leases_active_end_idx ON leases (end_time) WHERE state = 'active';

-- What a lease asks for: count nodes of a class with traits, optionally in
-- one topology domain (rule required) or as few as possible (preferred).
CREATE TABLE lease_reservations (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lease_id bigint NOT NULL REFERENCES leases (id) ON DELETE CASCADE,
    resource_class text NOT NULL,
    traits text[] NOT NULL DEFAULT '{}',
    forbidden_traits text[] NOT NULL DEFAULT '{}',
    count integer NOT NULL CHECK (count > 0),
    rule text NOT NULL DEFAULT 'none' CHECK (rule IN ('none', 'required', 'preferred')),
    rule_level text CHECK ((rule = 'none') = (rule_level IS NULL)),
    -- the domain chosen under rule required (path prefix, coarse to fine).
    domain text[]
);
CREATE INDEX lease_reservations_lease_idx ON lease_reservations (lease_id, id);

-- The nodes booked, each for the lease's window. The exclusion constraint
-- is the guarantee: two rows of one node whose windows overlap cannot both
-- commit, whatever the concurrency (the second gets SQLSTATE 23P01). It is
-- partial: a cancelled or ended lease's rows are kept (which nodes it
-- had) with released = true and stop blocking. Deleting a node deletes
-- its rows (replacing it in the lease is a later part of issue 43).
CREATE TABLE lease_nodes (
    lease_id bigint NOT NULL REFERENCES leases (id) ON DELETE CASCADE,
    reservation_id bigint NOT NULL REFERENCES lease_reservations (id) ON DELETE CASCADE,
    node_id bigint NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    during tstzrange NOT NULL CHECK (NOT isempty(during) AND lower_inc(during) AND NOT upper_inc(during)
                                     AND NOT lower_inf(during) AND NOT upper_inf(during)),
    released boolean NOT NULL DEFAULT false,
    PRIMARY KEY (lease_id, node_id),
    CONSTRAINT lease_nodes_no_overlap EXCLUDE USING gist (node_id WITH =, during WITH &&) WHERE (NOT released)
);
CREATE INDEX lease_nodes_node_idx ON lease_nodes (node_id);

-- +goose Down
DROP TABLE lease_nodes;
DROP TABLE lease_reservations;
DROP TABLE leases;
ALTER TABLE nodes DROP COLUMN reservable;
