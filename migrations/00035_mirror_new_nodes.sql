-- +goose Up
-- Kind: expand. A function body only.
-- metalloc_ironic_mirror (00025) inserts the nodes it has not mirrored yet
-- with ON CONFLICT (uuid) DO NOTHING. A refresh and a full sync that
-- inserted the same new node at once collided on its other unique key, the
-- name: the second failed with a unique violation instead of finding the
-- first's row (TestMirrorRaces, once in CI). A writer that creates nodes
-- now takes a transaction-scoped advisory lock first, so creators take
-- turns; writers of known nodes only, the usual refresh and sync, do not
-- take it. It is taken before any row lock of the function, and whoever
-- waits for it holds none of them, so it cannot close a cycle.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_ironic_mirror(p_nodes jsonb, p_allocations jsonb, p_read_at timestamp with time zone, p_holder bigint, OUT created integer, OUT updated integer, OUT stale integer, OUT lost boolean) RETURNS record
    LANGUAGE plpgsql
    AS $$
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

    -- A node not mirrored yet has no row to lock: writers that create
    -- nodes take turns, so that a refresh and a sync inserting the same
    -- new node at once do not collide on its name (a unique key that
    -- ON CONFLICT (uuid) does not cover); the second sees the first's row.
    IF EXISTS (SELECT 1 FROM unnest(v_all) i WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.uuid = i.uuid)) THEN
        PERFORM pg_advisory_xact_lock(hashtext('metalloc_ironic_mirror: new nodes'));
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_ironic_mirror(p_nodes jsonb, p_allocations jsonb, p_read_at timestamp with time zone, p_holder bigint, OUT created integer, OUT updated integer, OUT stale integer, OUT lost boolean) RETURNS record
    LANGUAGE plpgsql
    AS $$
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
