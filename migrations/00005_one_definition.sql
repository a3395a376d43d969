-- +goose Up
-- Kind: expand. New functions, a view, an index rebuilt and metalloc_pick's
-- body replaced (same arguments and results).
-- Each predicate of the allocation protocol gets one definition that every
-- query uses (docs/architecture.md, conductor/doc.go):
--   metalloc_node_free        a node can take an allocation right now
--   metalloc_node_in_scope    a node is among an allocation's candidate_nodes
--                             and owned by or leased to its owner
--   metalloc_node_has_traits  a node has every requested trait
--   metalloc_conductor_alive  a conductor is alive
--   metalloc_deallocate       a node gives its allocation up
-- The functions are plain SQL expressions (IMMUTABLE or STABLE), so the
-- planner inlines them: a query that calls metalloc_node_free still matches
-- the partial index nodes_free_idx, which is defined with the same call.
-- The generated schema.sql shows the current definitions in one place.

-- +goose StatementBegin
-- A node is free when an allocation may take it right now: available, not in
-- maintenance, with a known power state, holding no instance and no
-- allocation (Ironic conductor/allocations.py filters, plus the power state
-- Ironic requires before deploying).
CREATE FUNCTION metalloc_node_free(
    provision_state text, maintenance boolean, power_state text,
    instance_uuid uuid, allocation_id bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN provision_state = 'available' AND NOT maintenance AND power_state IS NOT NULL
   AND instance_uuid IS NULL AND allocation_id IS NULL;
-- +goose StatementEnd

-- +goose StatementBegin
-- A node is in an allocation's scope when it is among p_candidates (NULL:
-- any node) and, when the allocation has an owner p_owner, the node is owned
-- by or leased to it (Ironic 1.60 owner rules).
CREATE FUNCTION metalloc_node_in_scope(
    node_uuid uuid, node_owner text, node_lessee text, p_candidates uuid[], p_owner text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (p_candidates IS NULL OR node_uuid = ANY(p_candidates))
   AND (p_owner IS NULL OR node_owner = p_owner OR node_lessee = p_owner);
-- +goose StatementEnd

-- +goose StatementBegin
-- A node whose traits are node_traits has every trait in p_traits. The
-- node's traits are only read when p_traits is not empty.
CREATE FUNCTION metalloc_node_has_traits(node_traits text[], p_traits text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN cardinality(p_traits) = 0 OR p_traits <@ node_traits;
-- +goose StatementEnd

-- +goose StatementBegin
-- A conductor is alive while it is online (it did not stop cleanly) and its
-- last heartbeat is younger than timeout_seconds, by the database clock.
-- Everything else is dead: its allocating rows may be taken over.
CREATE FUNCTION metalloc_conductor_alive(online boolean, heartbeat_at timestamptz, timeout_seconds float8)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN online AND heartbeat_at > now() - make_interval(secs => timeout_seconds);
-- +goose StatementEnd

DROP INDEX nodes_free_idx;
-- The pick's walk: free nodes of one resource class in id order.
CREATE INDEX nodes_free_idx ON nodes (resource_class, id)
    WHERE metalloc_node_free(provision_state, maintenance, power_state, instance_uuid, allocation_id);

-- Free nodes, each with its traits (unordered; read only when a query uses
-- the column). FOR UPDATE OF a row of this view locks the node.
CREATE VIEW free_nodes AS
SELECT n.*, ARRAY(SELECT t.trait FROM node_traits t WHERE t.node_id = n.id) AS traits
  FROM nodes n
 WHERE metalloc_node_free(n.provision_state, n.maintenance, n.power_state, n.instance_uuid, n.allocation_id);

-- +goose StatementBegin
-- Deallocation, the one implementation (allocation DELETE, node DELETE,
-- tear down, removing a node's instance_uuid): the node holding allocation
-- p_allocation_id forgets it and its instance, and the row is deleted. The
-- caller holds the node's row lock first (lock order: node, then
-- allocation).
CREATE FUNCTION metalloc_deallocate(p_allocation_id bigint)
RETURNS void
LANGUAGE sql AS $$
    UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL, updated_at = now()
     WHERE allocation_id = p_allocation_id;
    DELETE FROM allocations WHERE id = p_allocation_id;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Picks and locks a free node (free_nodes) of p_resource_class in scope with
-- the requested traits, with FOR UPDATE SKIP LOCKED: it never waits for a
-- node another conductor or an API request holds, and PostgreSQL re-checks
-- the filters on the newest version of the row it locks (nodes this
-- transaction already reserved no longer match). It tries, in order: the
-- node whose name is p_name (the allocation's name, as Ironic 1.79 does); a
-- random one among p_candidates; else the first match at or after the random
-- node id p_start, wrapping around (a shuffle that reads a few entries of
-- nodes_free_idx instead of sorting every candidate). No row: no unlocked
-- node fits.
--
-- Each query is written so that one plan is right whatever the parameters
-- (a name lookup; an index lookup per candidate; an ordered range scan of
-- nodes_free_idx that stops at the first unlocked match), and PL/pgSQL is
-- told to keep that generic plan (plan_cache_mode): planning the query anew
-- for each call cost more than running it. enable_sort = off keeps the
-- planner from trading the ordered scan for "fetch every free node of the
-- class, then sort", which its estimates for unknown parameters favour and
-- which costs a pick O(free nodes) under load; the candidates' random order
-- still sorts, having no alternative. jit = off: that sort's penalty cost
-- would otherwise trigger JIT compilation (100 ms and more) at every call
-- of a query that runs in microseconds.
CREATE OR REPLACE FUNCTION metalloc_pick(
    p_resource_class text, p_traits text[], p_candidates uuid[], p_owner text,
    p_name text, p_start bigint, OUT node_id bigint, OUT node_uuid uuid)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    v_lo bigint;
    v_hi bigint;
BEGIN
    IF p_name IS NOT NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM free_nodes n
         WHERE n.name = p_name AND n.resource_class = p_resource_class
           AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, p_candidates, p_owner)
           AND metalloc_node_has_traits(n.traits, p_traits)
           FOR UPDATE OF n SKIP LOCKED;
        IF node_id IS NOT NULL THEN
            RETURN;
        END IF;
    END IF;
    IF p_candidates IS NOT NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM unnest(p_candidates) c (uuid) JOIN free_nodes n ON n.uuid = c.uuid
         WHERE n.resource_class = p_resource_class
           AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
           AND metalloc_node_has_traits(n.traits, p_traits)
         ORDER BY random()
         LIMIT 1
           FOR UPDATE OF n SKIP LOCKED;
        RETURN;
    END IF;
    -- From p_start to the end of the id range, then from its beginning.
    FOR pass IN 1..2 LOOP
        IF pass = 1 THEN
            v_lo := p_start; v_hi := 9223372036854775807;
        ELSE
            v_lo := -9223372036854775808; v_hi := p_start;
        END IF;
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM free_nodes n
         WHERE n.resource_class = p_resource_class
           AND n.id >= v_lo AND n.id < v_hi
           AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
           AND metalloc_node_has_traits(n.traits, p_traits)
         ORDER BY n.id
         LIMIT 1
           FOR UPDATE OF n SKIP LOCKED;
        EXIT WHEN node_id IS NOT NULL;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- metalloc_pick as migration 00001 created it.
CREATE OR REPLACE FUNCTION metalloc_pick(
    p_resource_class text, p_traits text[], p_candidates uuid[], p_owner text,
    p_name text, p_start bigint, OUT node_id bigint, OUT node_uuid uuid)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_name IS NOT NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM nodes n
         WHERE n.name = p_name
           AND (p_candidates IS NULL OR n.uuid = ANY(p_candidates))
           AND n.provision_state = 'available' AND NOT n.maintenance
           AND n.power_state IS NOT NULL AND n.instance_uuid IS NULL AND n.allocation_id IS NULL
           AND n.resource_class = p_resource_class
           AND (p_owner IS NULL OR n.owner = p_owner OR n.lessee = p_owner)
           AND (cardinality(p_traits) = 0
                OR p_traits <@ ARRAY(SELECT nt.trait FROM node_traits nt WHERE nt.node_id = n.id))
           FOR UPDATE OF n SKIP LOCKED;
        IF node_id IS NOT NULL THEN
            RETURN;
        END IF;
    END IF;
    IF p_candidates IS NOT NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM nodes n
         WHERE n.uuid = ANY(p_candidates)
           AND n.provision_state = 'available' AND NOT n.maintenance
           AND n.power_state IS NOT NULL AND n.instance_uuid IS NULL AND n.allocation_id IS NULL
           AND n.resource_class = p_resource_class
           AND (p_owner IS NULL OR n.owner = p_owner OR n.lessee = p_owner)
           AND (cardinality(p_traits) = 0
                OR p_traits <@ ARRAY(SELECT nt.trait FROM node_traits nt WHERE nt.node_id = n.id))
         ORDER BY random()
         LIMIT 1
           FOR UPDATE OF n SKIP LOCKED;
        RETURN;
    END IF;
    SELECT n.id, n.uuid INTO node_id, node_uuid
      FROM nodes n
     WHERE n.id >= p_start
       AND n.provision_state = 'available' AND NOT n.maintenance
           AND n.power_state IS NOT NULL AND n.instance_uuid IS NULL AND n.allocation_id IS NULL
           AND n.resource_class = p_resource_class
           AND (p_owner IS NULL OR n.owner = p_owner OR n.lessee = p_owner)
           AND (cardinality(p_traits) = 0
                OR p_traits <@ ARRAY(SELECT nt.trait FROM node_traits nt WHERE nt.node_id = n.id))
     ORDER BY n.id
     LIMIT 1
       FOR UPDATE OF n SKIP LOCKED;
    IF node_id IS NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM nodes n
         WHERE n.id < p_start
           AND n.provision_state = 'available' AND NOT n.maintenance
           AND n.power_state IS NOT NULL AND n.instance_uuid IS NULL AND n.allocation_id IS NULL
           AND n.resource_class = p_resource_class
           AND (p_owner IS NULL OR n.owner = p_owner OR n.lessee = p_owner)
           AND (cardinality(p_traits) = 0
                OR p_traits <@ ARRAY(SELECT nt.trait FROM node_traits nt WHERE nt.node_id = n.id))
         ORDER BY n.id
         LIMIT 1
           FOR UPDATE OF n SKIP LOCKED;
    END IF;
END;
$$;
-- +goose StatementEnd
DROP FUNCTION metalloc_deallocate(bigint);
DROP VIEW free_nodes;
DROP INDEX nodes_free_idx;
CREATE INDEX nodes_free_idx ON nodes (resource_class, id)
    WHERE provision_state = 'available' AND NOT maintenance
      AND power_state IS NOT NULL AND instance_uuid IS NULL;
DROP FUNCTION metalloc_conductor_alive(boolean, timestamptz, float8);
DROP FUNCTION metalloc_node_has_traits(text[], text[]);
DROP FUNCTION metalloc_node_in_scope(uuid, text, text, uuid[], text);
DROP FUNCTION metalloc_node_free(text, boolean, text, uuid, bigint);
