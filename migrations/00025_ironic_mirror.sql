-- +goose Up
-- Kind: expand. New tables, a type and functions only.
-- metalloc in front of an existing Ironic (package ironic): Ironic is the
-- system of record for nodes and the conductors mirror them into nodes and
-- node_traits. ironic_nodes keeps, per mirrored node, what the mirror
-- needs besides the node's own columns: when Ironic's answer was read
-- (read_at, by the database clock, taken before the request was sent: a
-- write of an older read never overwrites a newer one), and Ironic's
-- instance_uuid and allocation_uuid as Ironic said them (the node's own
-- instance_uuid stays metalloc's while metalloc holds the node for an
-- allocation). ironic_sync_lease is the one row saying which conductor runs
-- the full sync; every write of the full sync is guarded by holder = me.
CREATE TABLE ironic_nodes (
    node_id           bigint PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
    read_at           timestamptz NOT NULL,
    instance_uuid     uuid,
    allocation_uuid   uuid
);

CREATE TABLE ironic_sync_lease (
    name                 text PRIMARY KEY,
    holder               bigint REFERENCES conductors (id) ON DELETE SET NULL,
    acquired_at          timestamptz,
    renewed_at           timestamptz,
    last_sync_started_at timestamptz,
    last_sync_at         timestamptz,
    last_sync_nodes      integer,
    last_error           text
);
INSERT INTO ironic_sync_lease (name) VALUES ('nodes');

-- One node as the mirror reads it from Ironic (GET /v1/nodes?fields=...),
-- the element type of metalloc_ironic_mirror's JSON array.
CREATE TYPE ironic_node_in AS (
    uuid                   uuid,
    name                   text,
    driver                 text,
    resource_class         text,
    traits                 text[],
    provision_state        text,
    target_provision_state text,
    power_state            text,
    target_power_state     text,
    maintenance            boolean,
    maintenance_reason     text,
    fault                  text,
    last_error             text,
    owner                  text,
    lessee                 text,
    instance_uuid          uuid,
    allocation_uuid        uuid,
    conductor_group        text,
    properties             jsonb,
    extra                  jsonb,
    description            text,
    protected              boolean,
    retired                boolean,
    shard                  text
);

-- metalloc_ironic_mirror writes nodes as Ironic answered them at p_read_at
-- (a JSON array of ironic_node_in; p_allocations, when not null, maps node
-- uuids to the uuid of their allocation in Ironic, for node lists, which
-- cannot ask for allocation_uuid): new ones are inserted, changed ones
-- updated (unchanged nodes are not written, only their read_at), traits
-- replaced. With p_holder (the full sync) it first renews the lease and
-- writes nothing, returning lost, unless p_holder holds it; without (a
-- prompt refresh by metalloc-api) it is unguarded. The rules:
--   * a node whose stored read is newer than p_read_at is left alone
--     (stale: the page was read before a refresh);
--   * a name Ironic gives a node is taken from any other node that still
--     has it (renamed in Ironic; its own row is corrected when read);
--   * likewise an instance_uuid, unless metalloc holds that other node for
--     an allocation: then this node gets no instance and is put into
--     maintenance with a reason saying why, until a later read finds the
--     conflict gone;
--   * a node metalloc holds (allocation_id set) keeps its instance_uuid
--     and allocation_id; Ironic's are kept in ironic_nodes for the
--     allocation backend to reconcile.
-- Locks: the page's ironic_nodes rows in node_id order (mirror writers
-- serialise per node and never deadlock among themselves), then only the
-- nodes that change: picks (FOR UPDATE SKIP LOCKED) are not held up by
-- nodes that did not change.
-- +goose StatementBegin
CREATE FUNCTION metalloc_ironic_mirror(p_nodes jsonb, p_allocations jsonb, p_read_at timestamptz, p_holder bigint,
    OUT created integer, OUT updated integer, OUT stale integer, OUT lost boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_all     ironic_node_in[];
    v_in      ironic_node_in[];
    v_stale   uuid[];
    v_blocked uuid[];
BEGIN
    created := 0; updated := 0; stale := 0; lost := false;
    IF p_holder IS NOT NULL THEN
        UPDATE ironic_sync_lease SET renewed_at = now() WHERE name = 'nodes' AND holder = p_holder;
        IF NOT FOUND THEN
            lost := true;
            RETURN;
        END IF;
    END IF;
    SELECT coalesce(array_agg(r), '{}') INTO v_all
      FROM jsonb_populate_recordset(NULL::ironic_node_in, p_nodes) r;
    IF p_allocations IS NOT NULL THEN
        SELECT coalesce(array_agg(r), '{}') INTO v_all
          FROM (SELECT i.uuid, i.name, i.driver, i.resource_class, i.traits, i.provision_state,
                       i.target_provision_state, i.power_state, i.target_power_state, i.maintenance,
                       i.maintenance_reason, i.fault, i.last_error, i.owner, i.lessee, i.instance_uuid,
                       coalesce(i.allocation_uuid, (p_allocations ->> i.uuid::text)::uuid), i.conductor_group,
                       i.properties, i.extra, i.description, i.protected, i.retired, i.shard
                  FROM unnest(v_all) i) r;
    END IF;

    PERFORM 1 FROM ironic_nodes m
     WHERE m.node_id IN (SELECT n.id FROM nodes n JOIN unnest(v_all) i ON i.uuid = n.uuid)
     ORDER BY m.node_id FOR UPDATE;
    SELECT coalesce(array_agg(n.uuid), '{}') INTO v_stale
      FROM nodes n JOIN ironic_nodes m ON m.node_id = n.id JOIN unnest(v_all) i ON i.uuid = n.uuid
     WHERE m.read_at > p_read_at;
    stale := cardinality(v_stale);
    SELECT coalesce(array_agg(i), '{}') INTO v_in FROM unnest(v_all) i WHERE i.uuid <> ALL (v_stale);

    UPDATE nodes o SET name = NULL, updated_at = now()
      FROM unnest(v_in) i
     WHERE i.name IS NOT NULL AND o.name = i.name AND o.uuid <> i.uuid;
    UPDATE nodes o SET instance_uuid = NULL, updated_at = now()
      FROM unnest(v_in) i
     WHERE i.instance_uuid IS NOT NULL AND o.instance_uuid = i.instance_uuid AND o.uuid <> i.uuid
       AND o.allocation_id IS NULL
       AND NOT EXISTS (SELECT 1 FROM nodes t WHERE t.uuid = i.uuid AND t.allocation_id IS NOT NULL);
    SELECT coalesce(array_agg(i.uuid), '{}') INTO v_blocked
      FROM unnest(v_in) i
     WHERE i.instance_uuid IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM nodes t WHERE t.uuid = i.uuid AND t.allocation_id IS NOT NULL)
       AND EXISTS (SELECT 1 FROM nodes o WHERE o.instance_uuid = i.instance_uuid AND o.uuid <> i.uuid);

    WITH nv AS (
        SELECT n.id, i.name, coalesce(i.driver, n.driver) AS driver, i.resource_class,
               i.provision_state, i.target_provision_state, i.power_state, i.target_power_state,
               coalesce(i.maintenance, false) OR i.uuid = ANY (v_blocked) AS maintenance,
               CASE WHEN i.uuid = ANY (v_blocked)
                    THEN 'metalloc: Ironic gives this node instance ' || i.instance_uuid
                         || ', which metalloc holds on another node; not allocatable until they agree'
                    ELSE i.maintenance_reason END AS maintenance_reason,
               i.fault, i.last_error, i.owner, i.lessee,
               CASE WHEN n.allocation_id IS NOT NULL THEN n.instance_uuid
                    WHEN i.uuid = ANY (v_blocked) THEN NULL
                    ELSE i.instance_uuid END AS instance_uuid,
               coalesce(i.conductor_group, '') AS conductor_group,
               coalesce(i.properties, '{}') AS properties, coalesce(i.extra, '{}') AS extra,
               i.description, coalesce(i.protected, false) AS protected,
               coalesce(i.retired, false) AS retired, i.shard
          FROM unnest(v_in) i JOIN nodes n ON n.uuid = i.uuid
    ), upd AS (
        UPDATE nodes n
           SET name = nv.name, driver = nv.driver, resource_class = nv.resource_class,
               provision_state = nv.provision_state, target_provision_state = nv.target_provision_state,
               power_state = nv.power_state, target_power_state = nv.target_power_state,
               maintenance = nv.maintenance, maintenance_reason = nv.maintenance_reason,
               fault = nv.fault, last_error = nv.last_error, owner = nv.owner, lessee = nv.lessee,
               instance_uuid = nv.instance_uuid, conductor_group = nv.conductor_group,
               properties = nv.properties, extra = nv.extra, description = nv.description,
               protected = nv.protected, retired = nv.retired, shard = nv.shard, updated_at = now()
          FROM nv
         WHERE n.id = nv.id
           AND (n.name, n.driver, n.resource_class, n.provision_state, n.target_provision_state,
                n.power_state, n.target_power_state, n.maintenance, n.maintenance_reason, n.fault,
                n.last_error, n.owner, n.lessee, n.instance_uuid, n.conductor_group, n.properties,
                n.extra, n.description, n.protected, n.retired, n.shard)
               IS DISTINCT FROM
               (nv.name, nv.driver, nv.resource_class, nv.provision_state, nv.target_provision_state,
                nv.power_state, nv.target_power_state, nv.maintenance, nv.maintenance_reason, nv.fault,
                nv.last_error, nv.owner, nv.lessee, nv.instance_uuid, nv.conductor_group, nv.properties,
                nv.extra, nv.description, nv.protected, nv.retired, nv.shard)
        RETURNING n.id
    )
    SELECT count(*) INTO updated FROM upd;

    WITH ins AS (
        INSERT INTO nodes (uuid, name, driver, resource_class, provision_state, target_provision_state,
                           power_state, target_power_state, maintenance, maintenance_reason, fault,
                           last_error, owner, lessee, instance_uuid, conductor_group, properties, extra,
                           description, protected, retired, shard)
        SELECT i.uuid, i.name, coalesce(i.driver, 'fake-hardware'), i.resource_class,
               coalesce(i.provision_state, 'enroll'), i.target_provision_state, i.power_state,
               i.target_power_state, coalesce(i.maintenance, false) OR i.uuid = ANY (v_blocked),
               CASE WHEN i.uuid = ANY (v_blocked)
                    THEN 'metalloc: Ironic gives this node instance ' || i.instance_uuid
                         || ', which metalloc holds on another node; not allocatable until they agree'
                    ELSE i.maintenance_reason END,
               i.fault, i.last_error, i.owner, i.lessee,
               CASE WHEN i.uuid = ANY (v_blocked) THEN NULL ELSE i.instance_uuid END,
               coalesce(i.conductor_group, ''), coalesce(i.properties, '{}'), coalesce(i.extra, '{}'),
               i.description, coalesce(i.protected, false), coalesce(i.retired, false), i.shard
          FROM unnest(v_in) i
         WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.uuid = i.uuid)
        ON CONFLICT (uuid) DO NOTHING
        RETURNING id
    )
    SELECT count(*) INTO created FROM ins;

    DELETE FROM node_traits t
     USING nodes n, unnest(v_in) i
     WHERE n.uuid = i.uuid AND t.node_id = n.id AND t.trait <> ALL (coalesce(i.traits, '{}'));
    INSERT INTO node_traits (node_id, trait)
    SELECT n.id, tr.trait
      FROM unnest(v_in) i JOIN nodes n ON n.uuid = i.uuid
     CROSS JOIN LATERAL unnest(coalesce(i.traits, '{}')) AS tr(trait)
    ON CONFLICT DO NOTHING;

    INSERT INTO ironic_nodes (node_id, read_at, instance_uuid, allocation_uuid)
    SELECT n.id, p_read_at, i.instance_uuid, i.allocation_uuid
      FROM unnest(v_in) i JOIN nodes n ON n.uuid = i.uuid
    ON CONFLICT (node_id) DO UPDATE
       SET read_at = EXCLUDED.read_at, instance_uuid = EXCLUDED.instance_uuid,
           allocation_uuid = EXCLUDED.allocation_uuid;
END;
$$;
-- +goose StatementEnd

-- metalloc_ironic_prune removes nodes that are gone from Ironic. Without
-- p_uuids (the end of a complete full sync that started at p_before) every
-- node not read since p_before is gone; with p_uuids (Ironic answered 404
-- for them at p_before) those not read after p_before are. With p_holder
-- it writes only while p_holder holds the lease (lost otherwise). A node
-- metalloc holds for an allocation still allocating is kept: the
-- allocation backend is between its writes and reconciles it (it learns
-- from Ironic that the node is gone), and a later prune removes it. A node
-- holding an active allocation goes with its allocation, as Ironic's node
-- deletion takes the node's allocation with it (metalloc_deallocate).
-- Nodes are locked with SKIP LOCKED: one busy now is removed next time.
-- +goose StatementBegin
CREATE FUNCTION metalloc_ironic_prune(p_before timestamptz, p_uuids uuid[], p_holder bigint,
    OUT deleted integer, OUT kept integer, OUT lost boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    deleted := 0; kept := 0; lost := false;
    IF p_holder IS NOT NULL THEN
        UPDATE ironic_sync_lease SET renewed_at = now() WHERE name = 'nodes' AND holder = p_holder;
        IF NOT FOUND THEN
            lost := true;
            RETURN;
        END IF;
    END IF;
    FOR r IN
        SELECT n.id, n.allocation_id
          FROM nodes n LEFT JOIN ironic_nodes m ON m.node_id = n.id
         WHERE CASE WHEN p_uuids IS NULL THEN m.read_at IS NULL OR m.read_at < p_before
                    ELSE n.uuid = ANY (p_uuids) AND (m.read_at IS NULL OR m.read_at <= p_before) END
         ORDER BY n.id
           FOR UPDATE OF n SKIP LOCKED
    LOOP
        IF r.allocation_id IS NOT NULL THEN
            IF EXISTS (SELECT 1 FROM allocations a WHERE a.id = r.allocation_id AND a.state = 'allocating') THEN
                kept := kept + 1;
                CONTINUE;
            END IF;
            PERFORM metalloc_deallocate(r.allocation_id);
        END IF;
        DELETE FROM nodes WHERE id = r.id;
        deleted := deleted + 1;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION metalloc_ironic_prune(timestamptz, uuid[], bigint);
DROP FUNCTION metalloc_ironic_mirror(jsonb, jsonb, timestamptz, bigint);
DROP TYPE ironic_node_in;
DROP TABLE ironic_sync_lease;
DROP TABLE ironic_nodes;
