-- +goose Up
-- Kind: expand. A function body only.
-- The placement claim's writes read each pick's inventory by its key and
-- bump the providers' generations by their ids, so that their plan cannot
-- depend on the tables' sizes (issue 29: plans that do not depend on the
-- statistics of the moment). A session keeps the plan it made at its
-- first claim: planned while Placement had a few providers (a new fleet's
-- first claims), the capacity re-read hash-joined the picks with the
-- whole inventories table, and a claim of one allocation read 257 buffers
-- once there were 10,000 more providers, against 106 before
-- (TestPlacementClaimWritesPlanIgnoresStatistics; EXPLAIN of the nested
-- statement through auto_explain: a Hash Join over an index scan of
-- inventories_class_provider_idx returning 10,004 rows).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_claim_reserve_placement(p_me bigint, p_batch integer, p_user_id text, p_consumer_type text) RETURNS TABLE(out_id bigint, out_uuid uuid, out_created_at timestamp with time zone, out_reserved boolean)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    SET jit TO 'off'
    SET enable_seqscan TO 'off'
    AS $$
DECLARE
    r allocation_requests;
    v_rows allocation_requests[] := '{}';
    -- Parallel to v_rows: the node picked for each (NULL: none).
    v_nodes bigint[] := '{}';
    -- The picks, for Placement's writes: the allocation (the consumer),
    -- its project, the node's uuid, the provider and the class.
    v_uuids uuid[] := '{}';
    v_projects text[] := '{}';
    v_node_uuids uuid[] := '{}';
    v_rps bigint[] := '{}';
    v_rcs integer[] := '{}';
    v_picked bigint[] := '{}';
    v_written uuid[] := '{}';
    -- Parallel to v_rows, for metalloc_reserve_batch: ids, uuids, traits
    -- and the node each is reserved on (NULL: not reserved).
    v_ids bigint[] := '{}';
    v_row_uuids uuid[] := '{}';
    v_traits jsonb[] := '{}';
    v_reserved bigint[] := '{}';
    v_node bigint;
    v_node_uuid uuid;
    v_rp bigint;
    v_rc integer;
    v_classes text[] := '{}';
    v_class_ids integer[] := '{}';
    v_k integer;
    v_lo bigint;
    v_hi bigint;
BEGIN
    SELECT coalesce(min(n.id), 0), coalesce(max(n.id), 0) INTO v_lo, v_hi FROM nodes n;
    FOR r IN
        SELECT v.*
          FROM (SELECT a.id FROM allocations a
                 WHERE a.state = 'allocating' AND a.conductor_affinity IS NULL
                 ORDER BY a.id
                 LIMIT p_batch
                   FOR UPDATE OF a SKIP LOCKED) c
          CROSS JOIN LATERAL (SELECT q.* FROM allocation_requests q WHERE q.id = c.id OFFSET 0) v
    LOOP
        v_node := NULL;
        v_rc := NULL;
        IF r.candidate_nodes IS NULL THEN
            -- Each class of the batch is looked up once.
            v_k := array_position(v_classes, r.resource_class);
            IF v_k IS NULL THEN
                SELECT rc.id INTO v_rc FROM placement.resource_classes rc
                 WHERE rc.name = metalloc_placement_class(r.resource_class);
                v_classes := v_classes || r.resource_class;
                v_class_ids := v_class_ids || v_rc;
            ELSE
                v_rc := v_class_ids[v_k];
            END IF;
        END IF;
        IF v_rc IS NOT NULL THEN
            -- The batch's own picks are locked by this transaction, which
            -- SKIP LOCKED does not skip: they are excluded.
            SELECT p.node_id, p.node_uuid, p.provider_id INTO v_node, v_node_uuid, v_rp
              FROM metalloc_pick(r.resource_class, r.traits, NULL, r.owner, NULL, v_rc,
                                 metalloc_pick_start(v_lo, v_hi), v_picked) p;
        END IF;
        v_rows := v_rows || r;
        v_nodes := v_nodes || v_node;
        IF v_node IS NOT NULL THEN
            v_picked := v_picked || v_node;
            v_uuids := v_uuids || r.uuid;
            v_projects := v_projects || coalesce(nullif(r.owner, ''), p_user_id);
            v_node_uuids := v_node_uuids || v_node_uuid;
            v_rps := v_rps || v_rp;
            v_rcs := v_rcs || v_rc;
        END IF;
    END LOOP;
    IF cardinality(v_picked) > 0 THEN
        WITH x AS (
            SELECT * FROM unnest(v_uuids, v_projects, v_node_uuids, v_rps, v_rcs)
                       AS x (uuid, project_id, node_uuid, rp, rc)
        ), fit AS (
            -- Each pick's inventory by its key, a lookup per pick (the
            -- subquery's OFFSET 0 keeps it from being joined otherwise),
            -- whatever the table's size when the session planned this.
            SELECT x.* FROM x
             CROSS JOIN LATERAL (SELECT i FROM placement.inventories i
                                  WHERE i.resource_provider_id = x.rp AND i.resource_class_id = x.rc
                                 OFFSET 0) s (inv)
             WHERE metalloc_placement_fits(s.inv,
                     (SELECT coalesce(sum(a.used), 0) FROM placement.allocations a
                       WHERE a.resource_provider_id = x.rp AND a.resource_class_id = x.rc)::bigint, 1)
        ), c AS (
            INSERT INTO placement.consumers (uuid, project_id, user_id, consumer_type, generation)
            SELECT fit.uuid, fit.project_id, p_user_id, p_consumer_type, 1 FROM fit
            ON CONFLICT (uuid) DO NOTHING
            RETURNING id, uuid
        ), a AS (
            INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
            SELECT fit.rp, c.id, fit.rc, 1 FROM c JOIN fit ON fit.uuid = c.uuid
            RETURNING resource_provider_id
        ), g AS (
            -- By the providers' ids, likewise never a join with the table.
            UPDATE placement.resource_providers p SET generation = p.generation + 1, updated_at = now()
             WHERE p.id = ANY (ARRAY(SELECT a.resource_provider_id FROM a))
        ), l AS (
            INSERT INTO placement_claims (consumer_uuid, provider_uuid)
            SELECT c.uuid, fit.node_uuid FROM c JOIN fit ON fit.uuid = c.uuid
            ON CONFLICT (consumer_uuid) DO UPDATE
               SET provider_uuid = EXCLUDED.provider_uuid, created_at = now()
        )
        SELECT coalesce(array_agg(c.uuid), '{}') INTO v_written FROM c;
    END IF;
    -- Reserved: the rows picked whose allocation was written; the rest
    -- are claimed for the general path.
    FOR v_k IN 1..cardinality(v_rows) LOOP
        r := v_rows[v_k];
        v_ids := v_ids || r.id;
        v_row_uuids := v_row_uuids || r.uuid;
        v_traits := v_traits || to_jsonb(r.traits);
        v_reserved := v_reserved
            || CASE WHEN v_nodes[v_k] IS NOT NULL AND r.uuid = ANY (v_written) THEN v_nodes[v_k] END;
    END LOOP;
    PERFORM metalloc_reserve_batch(p_me, v_ids, v_row_uuids, v_traits, v_reserved);
    FOR v_k IN 1..cardinality(v_rows) LOOP
        r := v_rows[v_k];
        out_id := r.id;
        out_uuid := r.uuid;
        out_created_at := r.created_at;
        out_reserved := v_reserved[v_k] IS NOT NULL;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_claim_reserve_placement(p_me bigint, p_batch integer, p_user_id text, p_consumer_type text) RETURNS TABLE(out_id bigint, out_uuid uuid, out_created_at timestamp with time zone, out_reserved boolean)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    SET jit TO 'off'
    SET enable_seqscan TO 'off'
    AS $$
DECLARE
    r allocation_requests;
    v_rows allocation_requests[] := '{}';
    -- Parallel to v_rows: the node picked for each (NULL: none).
    v_nodes bigint[] := '{}';
    -- The picks, for Placement's writes: the allocation (the consumer),
    -- its project, the node's uuid, the provider and the class.
    v_uuids uuid[] := '{}';
    v_projects text[] := '{}';
    v_node_uuids uuid[] := '{}';
    v_rps bigint[] := '{}';
    v_rcs integer[] := '{}';
    v_picked bigint[] := '{}';
    v_written uuid[] := '{}';
    -- Parallel to v_rows, for metalloc_reserve_batch: ids, uuids, traits
    -- and the node each is reserved on (NULL: not reserved).
    v_ids bigint[] := '{}';
    v_row_uuids uuid[] := '{}';
    v_traits jsonb[] := '{}';
    v_reserved bigint[] := '{}';
    v_node bigint;
    v_node_uuid uuid;
    v_rp bigint;
    v_rc integer;
    v_classes text[] := '{}';
    v_class_ids integer[] := '{}';
    v_k integer;
    v_lo bigint;
    v_hi bigint;
BEGIN
    SELECT coalesce(min(n.id), 0), coalesce(max(n.id), 0) INTO v_lo, v_hi FROM nodes n;
    FOR r IN
        SELECT v.*
          FROM (SELECT a.id FROM allocations a
                 WHERE a.state = 'allocating' AND a.conductor_affinity IS NULL
                 ORDER BY a.id
                 LIMIT p_batch
                   FOR UPDATE OF a SKIP LOCKED) c
          CROSS JOIN LATERAL (SELECT q.* FROM allocation_requests q WHERE q.id = c.id OFFSET 0) v
    LOOP
        v_node := NULL;
        v_rc := NULL;
        IF r.candidate_nodes IS NULL THEN
            -- Each class of the batch is looked up once.
            v_k := array_position(v_classes, r.resource_class);
            IF v_k IS NULL THEN
                SELECT rc.id INTO v_rc FROM placement.resource_classes rc
                 WHERE rc.name = metalloc_placement_class(r.resource_class);
                v_classes := v_classes || r.resource_class;
                v_class_ids := v_class_ids || v_rc;
            ELSE
                v_rc := v_class_ids[v_k];
            END IF;
        END IF;
        IF v_rc IS NOT NULL THEN
            -- The batch's own picks are locked by this transaction, which
            -- SKIP LOCKED does not skip: they are excluded.
            SELECT p.node_id, p.node_uuid, p.provider_id INTO v_node, v_node_uuid, v_rp
              FROM metalloc_pick(r.resource_class, r.traits, NULL, r.owner, NULL, v_rc,
                                 metalloc_pick_start(v_lo, v_hi), v_picked) p;
        END IF;
        v_rows := v_rows || r;
        v_nodes := v_nodes || v_node;
        IF v_node IS NOT NULL THEN
            v_picked := v_picked || v_node;
            v_uuids := v_uuids || r.uuid;
            v_projects := v_projects || coalesce(nullif(r.owner, ''), p_user_id);
            v_node_uuids := v_node_uuids || v_node_uuid;
            v_rps := v_rps || v_rp;
            v_rcs := v_rcs || v_rc;
        END IF;
    END LOOP;
    IF cardinality(v_picked) > 0 THEN
        WITH x AS (
            SELECT * FROM unnest(v_uuids, v_projects, v_node_uuids, v_rps, v_rcs)
                       AS x (uuid, project_id, node_uuid, rp, rc)
        ), fit AS (
            SELECT x.* FROM x
              JOIN placement.inventories inv ON inv.resource_provider_id = x.rp AND inv.resource_class_id = x.rc
             WHERE metalloc_placement_fits(inv,
                     (SELECT coalesce(sum(a.used), 0) FROM placement.allocations a
                       WHERE a.resource_provider_id = x.rp AND a.resource_class_id = x.rc)::bigint, 1)
        ), c AS (
            INSERT INTO placement.consumers (uuid, project_id, user_id, consumer_type, generation)
            SELECT fit.uuid, fit.project_id, p_user_id, p_consumer_type, 1 FROM fit
            ON CONFLICT (uuid) DO NOTHING
            RETURNING id, uuid
        ), a AS (
            INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
            SELECT fit.rp, c.id, fit.rc, 1 FROM c JOIN fit ON fit.uuid = c.uuid
            RETURNING resource_provider_id
        ), g AS (
            UPDATE placement.resource_providers p SET generation = p.generation + 1, updated_at = now()
             WHERE p.id IN (SELECT a.resource_provider_id FROM a)
        ), l AS (
            INSERT INTO placement_claims (consumer_uuid, provider_uuid)
            SELECT c.uuid, fit.node_uuid FROM c JOIN fit ON fit.uuid = c.uuid
            ON CONFLICT (consumer_uuid) DO UPDATE
               SET provider_uuid = EXCLUDED.provider_uuid, created_at = now()
        )
        SELECT coalesce(array_agg(c.uuid), '{}') INTO v_written FROM c;
    END IF;
    -- Reserved: the rows picked whose allocation was written; the rest
    -- are claimed for the general path.
    FOR v_k IN 1..cardinality(v_rows) LOOP
        r := v_rows[v_k];
        v_ids := v_ids || r.id;
        v_row_uuids := v_row_uuids || r.uuid;
        v_traits := v_traits || to_jsonb(r.traits);
        v_reserved := v_reserved
            || CASE WHEN v_nodes[v_k] IS NOT NULL AND r.uuid = ANY (v_written) THEN v_nodes[v_k] END;
    END LOOP;
    PERFORM metalloc_reserve_batch(p_me, v_ids, v_row_uuids, v_traits, v_reserved);
    FOR v_k IN 1..cardinality(v_rows) LOOP
        r := v_rows[v_k];
        out_id := r.id;
        out_uuid := r.uuid;
        out_created_at := r.created_at;
        out_reserved := v_reserved[v_k] IS NOT NULL;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd
