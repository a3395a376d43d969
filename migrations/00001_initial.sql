-- +goose Up
-- Kind: expand. The first schema: nothing ran before it.
-- Conductors register here and heartbeat; allocations point at the conductor
-- that owns them through conductor_affinity.
CREATE TABLE conductors (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hostname        text        NOT NULL UNIQUE,
    conductor_group text        NOT NULL DEFAULT '',
    drivers         text[]      NOT NULL DEFAULT '{}',
    version         text        NOT NULL DEFAULT '',
    online          boolean     NOT NULL DEFAULT true,
    started_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz
);

CREATE TABLE nodes (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid                   uuid        NOT NULL UNIQUE,
    name                   text        UNIQUE,
    driver                 text        NOT NULL,
    resource_class         text,
    provision_state        text        NOT NULL,
    target_provision_state text,
    provision_updated_at   timestamptz,
    power_state            text,
    target_power_state     text,
    maintenance            boolean     NOT NULL DEFAULT false,
    maintenance_reason     text,
    fault                  text,
    last_error             text,
    -- A node holds at most one instance and at most one allocation.
    instance_uuid          uuid        UNIQUE,
    allocation_id          bigint      UNIQUE,
    owner                  text,
    lessee                 text,
    description            text,
    conductor_group        text        NOT NULL DEFAULT '',
    reservation            text,
    protected              boolean     NOT NULL DEFAULT false,
    protected_reason       text,
    retired                boolean     NOT NULL DEFAULT false,
    retired_reason         text,
    automated_clean        boolean,
    console_enabled        boolean     NOT NULL DEFAULT false,
    shard                  text,
    properties             jsonb       NOT NULL DEFAULT '{}',
    extra                  jsonb       NOT NULL DEFAULT '{}',
    instance_info          jsonb       NOT NULL DEFAULT '{}',
    driver_info            jsonb       NOT NULL DEFAULT '{}',
    driver_internal_info   jsonb       NOT NULL DEFAULT '{}',
    -- Hardware interface names (boot_interface, deploy_interface, ...).
    interfaces             jsonb       NOT NULL DEFAULT '{}',
    network_data           jsonb       NOT NULL DEFAULT '{}',
    raid_config            jsonb       NOT NULL DEFAULT '{}',
    target_raid_config     jsonb       NOT NULL DEFAULT '{}',
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz
) WITH (fillfactor = 80);

-- The conductor's candidate query: free nodes of one resource class.
CREATE INDEX nodes_free_idx ON nodes (resource_class, id)
    WHERE provision_state = 'available' AND NOT maintenance
      AND power_state IS NOT NULL AND instance_uuid IS NULL;

CREATE TABLE node_traits (
    node_id    bigint      NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    trait      text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, trait)
);
CREATE INDEX node_traits_trait_idx ON node_traits (trait, node_id);

CREATE TABLE allocations (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid               uuid        NOT NULL UNIQUE,
    name               text        UNIQUE,
    -- An allocation holds at most one node; deleting the node deletes it.
    node_id            bigint      UNIQUE REFERENCES nodes (id) ON DELETE CASCADE,
    state              text        NOT NULL DEFAULT 'allocating'
                       CHECK (state IN ('allocating', 'active', 'error')),
    last_error         text,
    resource_class     text        NOT NULL,
    -- Node UUIDs the allocation may pick from; NULL means any node.
    candidate_nodes    uuid[],
    extra              jsonb       NOT NULL DEFAULT '{}',
    owner              text,
    -- The conductor (conductors.id) processing this allocation; NULL until
    -- one claims it. Deliberately not a foreign key: the check would take a
    -- share lock on the conductor's row in every claim, and metalloc never
    -- deletes conductor rows.
    conductor_affinity bigint,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz,
    CHECK (state <> 'active' OR node_id IS NOT NULL)
) WITH (fillfactor = 80);
-- Allocating rows in arrival order: the conductors' claim query (unowned
-- ones), start-up resume and takeover (owned ones). conductor_affinity is in
-- no index, so a claim is a HOT update that writes no index entry; other
-- secondary indexes are left out on purpose for the same reason.
CREATE INDEX allocations_allocating_idx ON allocations (id) WHERE state = 'allocating';

ALTER TABLE nodes ADD CONSTRAINT nodes_allocation_id_fkey
    FOREIGN KEY (allocation_id) REFERENCES allocations (id) ON DELETE SET NULL;

CREATE TABLE allocation_traits (
    allocation_id bigint NOT NULL REFERENCES allocations (id) ON DELETE CASCADE,
    trait         text   NOT NULL,
    PRIMARY KEY (allocation_id, trait)
);

-- +goose StatementBegin
-- Allocation states move only allocating -> active | error.
CREATE FUNCTION allocations_state_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state <> OLD.state AND OLD.state <> 'allocating' THEN
        RAISE EXCEPTION 'allocation % cannot move from % to %', OLD.uuid, OLD.state, NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER allocations_state_guard BEFORE UPDATE OF state ON allocations
    FOR EACH ROW WHEN (NEW.state <> OLD.state AND OLD.state <> 'allocating')
    EXECUTE FUNCTION allocations_state_guard();

-- +goose StatementBegin
-- At commit, an allocation that names a node must be named back by that node
-- (nodes.allocation_id), and the node's instance_uuid must be the allocation's
-- uuid; a node naming an allocation must be named back too.
CREATE FUNCTION allocation_node_link_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ok boolean;
BEGIN
    IF TG_TABLE_NAME = 'allocations' THEN
        IF NEW.node_id IS NULL THEN
            RETURN NULL;
        END IF;
        SELECT n.allocation_id = a.id AND n.instance_uuid = a.uuid INTO ok
          FROM allocations a JOIN nodes n ON n.id = a.node_id
         WHERE a.id = NEW.id;
        IF ok IS DISTINCT FROM true AND EXISTS (SELECT 1 FROM allocations WHERE id = NEW.id) THEN
            RAISE EXCEPTION 'allocation % names node % which does not hold it', NEW.uuid, NEW.node_id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    ELSE
        IF NEW.allocation_id IS NULL THEN
            RETURN NULL;
        END IF;
        SELECT a.node_id = n.id AND n.instance_uuid = a.uuid INTO ok
          FROM nodes n JOIN allocations a ON a.id = n.allocation_id
         WHERE n.id = NEW.id;
        IF ok IS DISTINCT FROM true AND EXISTS (SELECT 1 FROM nodes WHERE id = NEW.id) THEN
            RAISE EXCEPTION 'node % names allocation % which does not name it back', NEW.uuid, NEW.allocation_id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE CONSTRAINT TRIGGER allocations_node_link AFTER INSERT OR UPDATE OF node_id ON allocations
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.node_id IS NOT NULL)
    EXECUTE FUNCTION allocation_node_link_check();
CREATE CONSTRAINT TRIGGER nodes_allocation_link AFTER INSERT OR UPDATE OF allocation_id, instance_uuid ON nodes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.allocation_id IS NOT NULL)
    EXECUTE FUNCTION allocation_node_link_check();

-- +goose StatementBegin
-- Wakes the conductors (LISTEN metalloc_allocations) whenever unclaimed work
-- appears: a new allocating row, or one released by a stopping conductor.
-- PostgreSQL delivers it at commit and folds duplicates within a transaction.
CREATE FUNCTION allocations_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('metalloc_allocations', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER allocations_notify_insert AFTER INSERT ON allocations
    FOR EACH ROW WHEN (NEW.state = 'allocating' AND NEW.conductor_affinity IS NULL)
    EXECUTE FUNCTION allocations_notify();
CREATE TRIGGER allocations_notify_release AFTER UPDATE OF conductor_affinity ON allocations
    FOR EACH ROW WHEN (NEW.state = 'allocating' AND NEW.conductor_affinity IS NULL
                       AND OLD.conductor_affinity IS NOT NULL)
    EXECUTE FUNCTION allocations_notify();

-- +goose StatementBegin
-- Picks and locks a free node for an allocation, with FOR UPDATE SKIP LOCKED:
-- it never waits for a node another conductor or an API request holds, and
-- PostgreSQL re-checks the filters on the newest version of the row it locks
-- (nodes this transaction already reserved no longer match). It tries, in
-- order: the node whose name is p_name (the allocation's name, as Ironic 1.79
-- does); a random one among p_candidates; else the first free match at or
-- after the random node id p_start, wrapping around (a shuffle that reads a
-- few entries of nodes_free_idx instead of sorting every candidate). No row:
-- no unlocked node fits.
CREATE FUNCTION metalloc_pick(
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

-- +goose StatementBegin
-- Records the reservation of locked node p_node_id for allocation
-- p_allocation_id (uuid p_uuid): the node gets instance_uuid, allocation_id
-- and the requested traits in instance_info.
CREATE FUNCTION metalloc_hold(p_node_id bigint, p_allocation_id bigint, p_uuid uuid, p_traits text[])
RETURNS void
LANGUAGE sql AS $$
    UPDATE nodes n
       SET instance_uuid = p_uuid, allocation_id = p_allocation_id,
           instance_info = n.instance_info || jsonb_build_object('traits', to_jsonb(p_traits)),
           updated_at = now()
     WHERE n.id = p_node_id;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- One reservation attempt for an allocation conductor p_me has claimed, in
-- one call (one transaction): pick a node (metalloc_pick), activate the
-- allocation only while p_me still owns it in state allocating
-- (compare-and-set), and record it on the node. No row: no unlocked node
-- fits. reserved = false: the allocation is no longer p_me's (taken over or
-- deleted) and nothing was written.
CREATE FUNCTION metalloc_reserve(
    p_allocation_id bigint, p_me bigint, p_resource_class text, p_traits text[],
    p_candidates uuid[], p_owner text, p_name text, p_start bigint)
RETURNS TABLE (node_id bigint, node_uuid uuid, reserved boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_alloc uuid;
BEGIN
    SELECT p.node_id, p.node_uuid INTO node_id, node_uuid
      FROM metalloc_pick(p_resource_class, p_traits, p_candidates, p_owner, p_name, p_start) p;
    IF node_id IS NULL THEN
        RETURN;
    END IF;
    UPDATE allocations a
       SET node_id = metalloc_reserve.node_id, state = 'active', last_error = NULL, updated_at = now()
     WHERE a.id = p_allocation_id AND a.conductor_affinity = p_me AND a.state = 'allocating'
    RETURNING a.uuid INTO v_alloc;
    reserved := v_alloc IS NOT NULL;
    IF reserved THEN
        PERFORM metalloc_hold(node_id, p_allocation_id, v_alloc, p_traits);
    END IF;
    RETURN NEXT;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The conductors' fast path: claims up to p_batch unowned allocating rows for
-- p_me (oldest first, FOR UPDATE SKIP LOCKED) and, in the same transaction,
-- reserves a node for each one that has an unlocked fitting node
-- (metalloc_pick with the random start p_starts[i]): the row is claimed and
-- activated by a single update. Rows with no node free right now are only
-- claimed (reserved = false) and left to the conductor's slower path (retry,
-- or error with an explanation). If the conductor dies, the transaction rolls
-- back and the rows stay unclaimed for the others.
CREATE FUNCTION metalloc_claim_reserve(p_me bigint, p_batch integer, p_starts bigint[])
RETURNS TABLE (allocation_id bigint, reserved boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    i integer := 0;
    v_node bigint;
    v_node_uuid uuid;
BEGIN
    FOR r IN
        SELECT a.id, a.uuid, a.name, a.resource_class, a.candidate_nodes, a.owner,
               (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
                  FROM allocation_traits t WHERE t.allocation_id = a.id)::text[] AS traits
          FROM allocations a
         WHERE a.state = 'allocating' AND a.conductor_affinity IS NULL
         ORDER BY a.id
         LIMIT p_batch
           FOR UPDATE OF a SKIP LOCKED
    LOOP
        i := i + 1;
        SELECT p.node_id, p.node_uuid INTO v_node, v_node_uuid
          FROM metalloc_pick(r.resource_class, r.traits, r.candidate_nodes, r.owner, r.name,
                             coalesce(p_starts[i], 0)) p;
        IF v_node IS NOT NULL THEN
            UPDATE allocations a
               SET conductor_affinity = p_me, node_id = v_node, state = 'active',
                   last_error = NULL, updated_at = now()
             WHERE a.id = r.id;
            PERFORM metalloc_hold(v_node, r.id, r.uuid, r.traits);
        ELSE
            UPDATE allocations a SET conductor_affinity = p_me WHERE a.id = r.id;
        END IF;
        allocation_id := r.id;
        reserved := v_node IS NOT NULL;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE allocation_traits;
ALTER TABLE nodes DROP CONSTRAINT nodes_allocation_id_fkey;
DROP TABLE allocations;
DROP TABLE node_traits;
DROP TABLE nodes;
DROP TABLE conductors;
DROP FUNCTION allocation_node_link_check();
DROP FUNCTION allocations_notify();
DROP FUNCTION metalloc_claim_reserve(bigint, integer, bigint[]);
DROP FUNCTION metalloc_reserve(bigint, bigint, text, text[], uuid[], text, text, bigint);
DROP FUNCTION metalloc_hold(bigint, bigint, uuid, text[]);
DROP FUNCTION metalloc_pick(text, text[], uuid[], text, text, bigint);
DROP FUNCTION allocations_state_guard();
