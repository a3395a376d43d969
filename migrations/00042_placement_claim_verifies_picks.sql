-- +goose Up
-- Kind: expand. Function bodies only.
-- The placement claim picks by metalloc's own filters and verifies its
-- picks against Placement afterwards, once per batch (issue 29: the
-- placement backend's burst at 80 % of the database backend's).
--
-- Before, metalloc_pick's placement branch joined every candidate it
-- scanned with Placement's tables (provider, inventory, children, usage,
-- traits) and locked the provider with the node; the claim's writes then
-- read inventory and usage again under that lock. Now the pick takes a
-- free node whose provider exists (a mirrored node) and locks the node
-- only. The claim then locks the picks' providers in one statement (in id
-- order, as Placement's API writers take them) and verifies every pick in
-- one statement that reads what committed before it: a root provider
-- without children, the class's inventory with room for one more, the
-- traits in Placement. A pick that fails stays locked and excluded, and
-- its row picks again, up to 4 rounds; later rounds skip a provider
-- another transaction holds rather than wait for it out of id order. The
-- writes no longer re-read capacity: the verification did, under the
-- lock. Claim by claim (2,000 allocations in batches of 8 on a restored
-- 10,000-node database): 470-506 ms against 499-534 ms (4 pairs).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_claim_reserve_placement(p_me bigint, p_batch integer, p_user_id text, p_consumer_type text) RETURNS TABLE(out_id bigint, out_uuid uuid, out_created_at timestamp with time zone, out_reserved boolean)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    SET jit TO 'off'
    SET enable_seqscan TO 'off'
    SET "metalloc.placement_claimed" TO 'on'
    AS $$
DECLARE
    r allocation_requests;
    v_rows allocation_requests[] := '{}';
    -- Parallel to v_rows: the node picked for each (NULL: none), its uuid,
    -- its provider and the row's Placement class.
    v_nodes bigint[] := '{}';
    v_node_uuids uuid[] := '{}';
    v_rps bigint[] := '{}';
    v_rcs integer[] := '{}';
    -- Every node this transaction locked, for metalloc_pick's p_exclude.
    v_picked bigint[] := '{}';
    -- The picks of this round to verify: their indexes into v_rows.
    v_check integer[];
    v_locked bigint[];
    v_bad integer[];
    v_written uuid[] := '{}';
    -- For metalloc_reserve_batch: ids, uuids, traits and the node each is
    -- reserved on (NULL: not reserved).
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
    v_round integer := 0;
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
        v_rows := v_rows || r;
        v_nodes := v_nodes || NULL::bigint;
        v_node_uuids := v_node_uuids || NULL::uuid;
        v_rps := v_rps || NULL::bigint;
        v_rcs := v_rcs || v_rc;
    END LOOP;
    -- Rounds: pick a node for every row still without one (metalloc_pick:
    -- free in metalloc, with the traits there, and mirrored), lock the
    -- picks' providers, then verify each pick against Placement under
    -- that lock. A pick Placement disagrees with stays locked and excluded,
    -- and its row picks again in the next round, up to 4 rounds; what is
    -- left unreserved goes to the general path.
    v_check := ARRAY(SELECT k FROM generate_series(1, cardinality(v_rows)) k);
    WHILE cardinality(v_check) > 0 AND v_round < 4 LOOP
        v_round := v_round + 1;
        FOREACH v_k IN ARRAY v_check LOOP
            v_node := NULL;
            IF v_rcs[v_k] IS NOT NULL THEN
                r := v_rows[v_k];
                -- The batch's own picks are locked by this transaction,
                -- which SKIP LOCKED does not skip: they are excluded.
                SELECT p.node_id, p.node_uuid, p.provider_id INTO v_node, v_node_uuid, v_rp
                  FROM metalloc_pick(r.resource_class, r.traits, NULL, r.owner, NULL, v_rcs[v_k],
                                     metalloc_pick_start(v_lo, v_hi), v_picked) p;
            END IF;
            v_nodes[v_k] := v_node;
            IF v_node IS NOT NULL THEN
                v_picked := v_picked || v_node;
                v_node_uuids[v_k] := v_node_uuid;
                v_rps[v_k] := v_rp;
            END IF;
        END LOOP;
        v_check := ARRAY(SELECT k FROM unnest(v_check) k WHERE v_nodes[k] IS NOT NULL);
        EXIT WHEN cardinality(v_check) = 0;
        -- The picks' root providers (PostgreSQL re-checks the root on the
        -- newest row version). The first round waits for them, in id order
        -- as Placement's API writers take them; later rounds skip a
        -- provider another transaction holds (that pick fails), so that
        -- they never wait out of that order.
        IF v_round = 1 THEN
            v_locked := ARRAY(SELECT p.id FROM placement.resource_providers p
                               WHERE p.id = ANY (ARRAY(SELECT v_rps[k] FROM unnest(v_check) k))
                                 AND p.parent_provider_id IS NULL
                               ORDER BY p.id
                                 FOR UPDATE OF p);
        ELSE
            v_locked := ARRAY(SELECT p.id FROM placement.resource_providers p
                               WHERE p.id = ANY (ARRAY(SELECT v_rps[k] FROM unnest(v_check) k))
                                 AND p.parent_provider_id IS NULL
                               ORDER BY p.id
                                 FOR UPDATE OF p SKIP LOCKED);
        END IF;
        -- Under the lock, a statement that reads what committed before it:
        -- a locked root provider without children, with the class's
        -- inventory and room for one more, and the row's traits in
        -- Placement. By keys, a lookup per pick whatever the tables' sizes
        -- (OFFSET 0 keeps each subquery from becoming a join, which a
        -- session that planned it on small tables could run as a scan of
        -- the whole table).
        v_bad := ARRAY(
            SELECT x.k FROM unnest(v_check) x (k)
             WHERE NOT (v_rps[x.k] = ANY (v_locked)
                 AND NOT EXISTS (SELECT 1 FROM placement.resource_providers ch
                                  WHERE ch.parent_provider_id = v_rps[x.k] OFFSET 0)
                 AND EXISTS (SELECT 1 FROM placement.inventories i
                              WHERE i.resource_provider_id = v_rps[x.k] AND i.resource_class_id = v_rcs[x.k]
                                AND metalloc_placement_fits(i,
                                      (SELECT coalesce(sum(a.used), 0) FROM placement.allocations a
                                        WHERE a.resource_provider_id = v_rps[x.k]
                                          AND a.resource_class_id = v_rcs[x.k])::bigint, 1)
                             OFFSET 0)
                 AND (cardinality((v_rows[x.k]).traits) = 0
                      OR (v_rows[x.k]).traits
                         <@ ARRAY(SELECT t.name FROM placement.resource_provider_traits pt
                                    JOIN placement.traits t ON t.id = pt.trait_id
                                   WHERE pt.resource_provider_id = v_rps[x.k]))));
        FOREACH v_k IN ARRAY v_bad LOOP
            v_nodes[v_k] := NULL;
        END LOOP;
        v_check := v_bad;
    END LOOP;
    -- Placement's rows for the verified picks, in one statement.
    IF EXISTS (SELECT 1 FROM unnest(v_nodes) n WHERE n IS NOT NULL) THEN
        WITH x AS (
            SELECT q.uuid, coalesce(nullif(q.owner, ''), p_user_id) AS project_id,
                   v_node_uuids[k] AS node_uuid, v_rps[k] AS rp, v_rcs[k] AS rc
              FROM generate_series(1, cardinality(v_rows)) k
              CROSS JOIN LATERAL (SELECT (v_rows[k]).uuid, (v_rows[k]).owner) q (uuid, owner)
             WHERE v_nodes[k] IS NOT NULL
        ), c AS (
            INSERT INTO placement.consumers (uuid, project_id, user_id, consumer_type, generation)
            SELECT x.uuid, x.project_id, p_user_id, p_consumer_type, 1 FROM x
            ON CONFLICT (uuid) DO NOTHING
            RETURNING id, uuid
        ), a AS (
            INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
            SELECT x.rp, c.id, x.rc, 1 FROM c JOIN x ON x.uuid = c.uuid
            RETURNING resource_provider_id
        ), g AS (
            -- By the providers' ids, never a join with the table.
            UPDATE placement.resource_providers p SET generation = p.generation + 1, updated_at = now()
             WHERE p.id = ANY (ARRAY(SELECT a.resource_provider_id FROM a))
        ), l AS (
            INSERT INTO placement_claims (consumer_uuid, provider_uuid)
            SELECT c.uuid, x.node_uuid FROM c JOIN x ON x.uuid = c.uuid
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_pick(p_resource_class text, p_traits text[], p_candidates uuid[], p_owner text, p_name text, p_placement_class integer DEFAULT NULL::integer, p_start bigint DEFAULT NULL::bigint, p_exclude bigint[] DEFAULT NULL::bigint[], OUT node_id bigint, OUT node_uuid uuid, OUT provider_id bigint) RETURNS record
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_sort TO 'off'
    SET jit TO 'off'
    SET join_collapse_limit TO '1'
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    SET enable_material TO 'off'
    AS $$
DECLARE
    v_start bigint;
    v_lo bigint;
    v_hi bigint;
BEGIN
    IF p_name IS NOT NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM free_nodes n
         WHERE n.name = p_name AND n.resource_class = p_resource_class
           AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, p_candidates, p_owner)
           AND metalloc_node_has_traits(n.traits, p_traits)
           AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
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
           AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
         ORDER BY random()
         LIMIT 1
           FOR UPDATE OF n SKIP LOCKED;
        RETURN;
    END IF;
    v_start := p_start;
    IF v_start IS NULL THEN
        SELECT metalloc_pick_start(coalesce(min(n.id), 0), coalesce(max(n.id), 0)) INTO v_start FROM nodes n;
    END IF;
    -- From the start to the end of the id range, then from its beginning.
    FOR pass IN 1..2 LOOP
        IF pass = 1 THEN
            v_lo := v_start; v_hi := 9223372036854775807;
        ELSE
            v_lo := -9223372036854775808; v_hi := v_start;
        END IF;
        IF p_placement_class IS NULL THEN
            SELECT n.id, n.uuid INTO node_id, node_uuid
              FROM free_nodes n
             WHERE n.resource_class = p_resource_class
               AND n.id >= v_lo AND n.id < v_hi
               AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
               AND metalloc_node_has_traits(n.traits, p_traits)
               AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
             ORDER BY n.id
             LIMIT 1
               FOR UPDATE OF n SKIP LOCKED;
        ELSE
            -- A mirrored node only; the claim verifies the rest against
            -- Placement under its providers' lock.
            SELECT n.id, n.uuid, rp.id INTO node_id, node_uuid, provider_id
              FROM free_nodes n
              JOIN placement.resource_providers rp ON rp.uuid = n.uuid
             WHERE n.resource_class = p_resource_class
               AND n.id >= v_lo AND n.id < v_hi
               AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
               AND metalloc_node_has_traits(n.traits, p_traits)
               AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
             ORDER BY n.id
             LIMIT 1
               FOR UPDATE OF n SKIP LOCKED;
        END IF;
        EXIT WHEN node_id IS NOT NULL;
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
    SET "metalloc.placement_claimed" TO 'on'
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_pick(p_resource_class text, p_traits text[], p_candidates uuid[], p_owner text, p_name text, p_placement_class integer DEFAULT NULL::integer, p_start bigint DEFAULT NULL::bigint, p_exclude bigint[] DEFAULT NULL::bigint[], OUT node_id bigint, OUT node_uuid uuid, OUT provider_id bigint) RETURNS record
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_sort TO 'off'
    SET jit TO 'off'
    SET join_collapse_limit TO '1'
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    SET enable_material TO 'off'
    AS $$
DECLARE
    v_start bigint;
    v_lo bigint;
    v_hi bigint;
BEGIN
    IF p_name IS NOT NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM free_nodes n
         WHERE n.name = p_name AND n.resource_class = p_resource_class
           AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, p_candidates, p_owner)
           AND metalloc_node_has_traits(n.traits, p_traits)
           AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
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
           AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
         ORDER BY random()
         LIMIT 1
           FOR UPDATE OF n SKIP LOCKED;
        RETURN;
    END IF;
    v_start := p_start;
    IF v_start IS NULL THEN
        SELECT metalloc_pick_start(coalesce(min(n.id), 0), coalesce(max(n.id), 0)) INTO v_start FROM nodes n;
    END IF;
    -- From the start to the end of the id range, then from its beginning.
    FOR pass IN 1..2 LOOP
        IF pass = 1 THEN
            v_lo := v_start; v_hi := 9223372036854775807;
        ELSE
            v_lo := -9223372036854775808; v_hi := v_start;
        END IF;
        IF p_placement_class IS NULL THEN
            SELECT n.id, n.uuid INTO node_id, node_uuid
              FROM free_nodes n
             WHERE n.resource_class = p_resource_class
               AND n.id >= v_lo AND n.id < v_hi
               AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
               AND metalloc_node_has_traits(n.traits, p_traits)
               AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
             ORDER BY n.id
             LIMIT 1
               FOR UPDATE OF n SKIP LOCKED;
        ELSE
            SELECT n.id, n.uuid, rp.id INTO node_id, node_uuid, provider_id
              FROM free_nodes n
              JOIN placement.resource_providers rp ON rp.uuid = n.uuid
              JOIN placement.inventories inv ON inv.resource_provider_id = rp.id
                                            AND inv.resource_class_id = p_placement_class
             WHERE n.resource_class = p_resource_class
               AND n.id >= v_lo AND n.id < v_hi
               AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
               AND metalloc_node_has_traits(n.traits, p_traits)
               AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
               AND rp.parent_provider_id IS NULL
               AND NOT EXISTS (SELECT 1 FROM placement.resource_providers ch
                                WHERE ch.parent_provider_id = rp.id)
               AND metalloc_placement_fits(inv,
                     (SELECT coalesce(sum(a.used), 0) FROM placement.allocations a
                       WHERE a.resource_provider_id = rp.id AND a.resource_class_id = p_placement_class)::bigint, 1)
               AND (cardinality(p_traits) = 0
                    OR p_traits <@ ARRAY(SELECT t.name FROM placement.resource_provider_traits pt
                                           JOIN placement.traits t ON t.id = pt.trait_id
                                          WHERE pt.resource_provider_id = rp.id))
             ORDER BY n.id
             LIMIT 1
               FOR UPDATE OF n, rp SKIP LOCKED;
        END IF;
        EXIT WHEN node_id IS NOT NULL;
    END LOOP;
END;
$$;
-- +goose StatementEnd
