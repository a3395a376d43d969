-- +goose Up
-- Kind: expand. It replaces function bodies only (same names, arguments
-- and results, same rows locked in the same order), so a binary built for
-- 00043 would work on it unchanged; today's start-up check still refuses
-- a schema newer than the binary's (rolling upgrades: issue 41).
-- Plans that hold whatever the node tables' statistics say (issue 44). A
-- session keeps the generic plans it made at its first use of a function
-- (metalloc_warm_up plans every statement of an allocation's life on a new
-- connection) until the tables' statistics change. Made while nodes and
-- node_traits were empty when last analyzed, then used on 10,000 nodes
-- enrolled through the API one at a time (no ANALYZE since, autovacuum
-- not yet come), three statements read whole tables or indexes (auto_explain,
-- 10,000 nodes with three traits each, a session warmed up on the empty
-- tables against one on the analyzed ones):
--   - each claim's id range (min(id), max(id) over nodes: metalloc_pick_start's
--     bounds): an aggregate over a full scan of nodes_topology_idx, 11,889
--     buffers, where two ends of nodes_pkey read 6. With both tables
--     believed empty, one scan costs less than the two ends of an index,
--     whatever the settings. Written now as the two ends themselves
--     (ORDER BY id LIMIT 1, each way), which the claims' enable_sort and
--     enable_seqscan = off leave one plan for: the ends of nodes_pkey;
--   - the pick's trait test (the free_nodes view's traits, every trait of
--     the node): a full scan of node_traits_trait_idx (trait, node_id) per
--     node the walk visits, 192 buffers, where node_traits_pkey reads 5.
--     Believed empty, both indexes cost the same, and the tie went to the
--     wrong one. The pick now reads only the traits asked for
--     (node_id = n.id AND trait = ANY (p_traits)): each index then has a
--     bound on its first column, and whichever the planner takes reads the
--     node's entries or one entry per trait asked, never the whole index;
--   - the API's insert (allocations_events_created, the events of new
--     rows): a hash join that read all of nodes (723 buffers per insert)
--     for the node of a backfill. A new allocating row has no node, so the
--     node's uuid is now a probe of nodes_pkey made only for a row that has
--     one (a backfill), with enable_seqscan = off so that the probe is an
--     index scan even as planned on an empty table.
-- metalloc_pick also turns bitmap scans off, as the claims do: its
-- statements are probes and walks of btrees, and a bitmap's choice
-- depended on the statistics too. Each statement now has the plan of a
-- session on the analyzed fleet whatever the statistics, at 100 nodes as at
-- 1,000,000 (TestClaimPlansIgnoreNodeStatistics, conductor/backend).

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_pick(p_resource_class text, p_traits text[], p_candidates uuid[], p_owner text, p_name text, p_placement_class integer DEFAULT NULL::integer, p_start bigint DEFAULT NULL::bigint, p_exclude bigint[] DEFAULT NULL::bigint[], OUT node_id bigint, OUT node_uuid uuid, OUT provider_id bigint)
 RETURNS record
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_sort TO 'off'
 SET jit TO 'off'
 SET join_collapse_limit TO '1'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_material TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
DECLARE
    v_start bigint;
    v_lo bigint;
    v_hi bigint;
BEGIN
    -- The trait test reads only the node's traits asked for (not the view's
    -- traits, all of them): each index of node_traits then has a bound on
    -- its first column, so no plan of it reads the whole index, even one
    -- made while node_traits was empty.
    IF p_name IS NOT NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM free_nodes n
         WHERE n.name = p_name AND n.resource_class = p_resource_class
           AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, p_candidates, p_owner)
           AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
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
           AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
           AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
         ORDER BY random()
         LIMIT 1
           FOR UPDATE OF n SKIP LOCKED;
        RETURN;
    END IF;
    v_start := p_start;
    IF v_start IS NULL THEN
        SELECT metalloc_pick_start(coalesce((SELECT n.id FROM nodes n ORDER BY n.id LIMIT 1), 0),
                                   coalesce((SELECT n.id FROM nodes n ORDER BY n.id DESC LIMIT 1), 0))
          INTO v_start;
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
               AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
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
               AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_claim_reserve(p_me bigint, p_batch integer)
 RETURNS TABLE(out_id bigint, out_uuid uuid, out_created_at timestamp with time zone, out_reserved boolean)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_bitmapscan TO 'off'
 SET enable_sort TO 'off'
 SET jit TO 'off'
 SET enable_seqscan TO 'off'
AS $$
DECLARE
    r record;
    v_node bigint;
    v_lo bigint;
    v_hi bigint;
    -- The batch's rows, and parallel to them the node picked (NULL: none).
    v_ids bigint[] := '{}';
    v_uuids uuid[] := '{}';
    v_created timestamptz[] := '{}';
    v_traits jsonb[] := '{}';
    v_nodes bigint[] := '{}';
    v_picked bigint[] := '{}';
    v_k integer;
BEGIN
    -- The id range, as the two ends of nodes_pkey: one plan whatever
    -- the statistics (min and max over nodes could be one scan of all).
    SELECT coalesce((SELECT n.id FROM nodes n ORDER BY n.id LIMIT 1), 0),
           coalesce((SELECT n.id FROM nodes n ORDER BY n.id DESC LIMIT 1), 0)
      INTO v_lo, v_hi;
    FOR r IN
        SELECT v.*
          FROM (SELECT a.id FROM allocations a
                 WHERE a.state = 'allocating' AND a.conductor_affinity IS NULL
                 ORDER BY a.id
                 LIMIT p_batch
                   FOR UPDATE OF a SKIP LOCKED) c
          CROSS JOIN LATERAL (SELECT q.* FROM allocation_requests q WHERE q.id = c.id OFFSET 0) v
    LOOP
        -- The batch's own picks are locked by this transaction, which
        -- SKIP LOCKED does not skip, and not held until the end: excluded.
        SELECT p.node_id INTO v_node
          FROM metalloc_pick(r.resource_class, r.traits, r.candidate_nodes, r.owner, r.name,
                             p_start => metalloc_pick_start(v_lo, v_hi), p_exclude => v_picked) p;
        v_ids := v_ids || r.id;
        v_uuids := v_uuids || r.uuid;
        v_created := v_created || r.created_at;
        v_traits := v_traits || to_jsonb(r.traits);
        v_nodes := v_nodes || v_node;
        IF v_node IS NOT NULL THEN
            v_picked := v_picked || v_node;
        END IF;
    END LOOP;
    PERFORM metalloc_reserve_batch(p_me, v_ids, v_uuids, v_traits, v_nodes);
    FOR v_k IN 1..cardinality(v_ids) LOOP
        out_id := v_ids[v_k];
        out_uuid := v_uuids[v_k];
        out_created_at := v_created[v_k];
        out_reserved := v_nodes[v_k] IS NOT NULL;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_claim_reserve_placement(p_me bigint, p_batch integer, p_user_id text, p_consumer_type text)
 RETURNS TABLE(out_id bigint, out_uuid uuid, out_created_at timestamp with time zone, out_reserved boolean)
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
    -- The id range, as the two ends of nodes_pkey: one plan whatever
    -- the statistics (min and max over nodes could be one scan of all).
    SELECT coalesce((SELECT n.id FROM nodes n ORDER BY n.id LIMIT 1), 0),
           coalesce((SELECT n.id FROM nodes n ORDER BY n.id DESC LIMIT 1), 0)
      INTO v_lo, v_hi;
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
CREATE OR REPLACE FUNCTION metalloc_ironic_claim_hold(p_me bigint, p_batch integer)
 RETURNS TABLE(out_id bigint, out_node_id bigint)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_bitmapscan TO 'off'
 SET enable_sort TO 'off'
 SET jit TO 'off'
AS $$
DECLARE
    r record;
    v_node bigint;
    v_lo bigint;
    v_hi bigint;
BEGIN
    -- The id range, as the two ends of nodes_pkey: one plan whatever
    -- the statistics (min and max over nodes could be one scan of all).
    SELECT coalesce((SELECT n.id FROM nodes n ORDER BY n.id LIMIT 1), 0),
           coalesce((SELECT n.id FROM nodes n ORDER BY n.id DESC LIMIT 1), 0)
      INTO v_lo, v_hi;
    FOR r IN
        SELECT v.*, c.node_id AS held
          FROM (SELECT a.id, a.node_id FROM allocations a
                 WHERE a.state = 'allocating' AND a.conductor_affinity IS NULL AND a.group_id IS NULL
                 ORDER BY a.id
                 LIMIT p_batch
                   FOR UPDATE OF a SKIP LOCKED) c
          CROSS JOIN LATERAL (SELECT q.* FROM allocation_requests q WHERE q.id = c.id OFFSET 0) v
    LOOP
        v_node := r.held;
        IF v_node IS NULL AND NOT EXISTS (SELECT 1 FROM ironic_allocations j
                                           WHERE j.uuid = r.uuid AND j.state = 'deleting') THEN
            SELECT p.node_id INTO v_node
              FROM metalloc_pick(r.resource_class, r.traits, r.candidate_nodes, r.owner, r.name,
                                 p_start => metalloc_pick_start(v_lo, v_hi)) p;
        END IF;
        UPDATE allocations a SET conductor_affinity = p_me, node_id = v_node WHERE a.id = r.id;
        IF v_node IS NOT NULL AND r.held IS NULL THEN
            PERFORM metalloc_hold(v_node, r.id, r.uuid, r.traits);
        END IF;
        IF v_node IS NOT NULL AND metalloc_ironic_intent(r.id, p_me, v_node) IS DISTINCT FROM -1 THEN
            out_node_id := v_node;
        ELSE
            out_node_id := NULL;
        END IF;
        out_id := r.id;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION allocations_events_created()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
AS $$
BEGIN
    INSERT INTO allocation_events (kind, allocation_uuid, name, state, resource_class, owner, node_uuid, last_error)
    SELECT 'created', r.uuid, r.name, r.state, r.resource_class, r.owner,
           CASE WHEN r.node_id IS NOT NULL THEN (SELECT n.uuid FROM nodes n WHERE n.id = r.node_id) END,
           r.last_error
      FROM new_rows r
     ORDER BY r.id;
    PERFORM pg_notify('metalloc_allocation_events', r.uuid::text || ' ' || r.state)
       FROM new_rows r
      ORDER BY r.id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_pick(p_resource_class text, p_traits text[], p_candidates uuid[], p_owner text, p_name text, p_placement_class integer DEFAULT NULL::integer, p_start bigint DEFAULT NULL::bigint, p_exclude bigint[] DEFAULT NULL::bigint[], OUT node_id bigint, OUT node_uuid uuid, OUT provider_id bigint)
 RETURNS record
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_claim_reserve(p_me bigint, p_batch integer)
 RETURNS TABLE(out_id bigint, out_uuid uuid, out_created_at timestamp with time zone, out_reserved boolean)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_bitmapscan TO 'off'
 SET enable_sort TO 'off'
 SET jit TO 'off'
 SET enable_seqscan TO 'off'
AS $$
DECLARE
    r record;
    v_node bigint;
    v_lo bigint;
    v_hi bigint;
    -- The batch's rows, and parallel to them the node picked (NULL: none).
    v_ids bigint[] := '{}';
    v_uuids uuid[] := '{}';
    v_created timestamptz[] := '{}';
    v_traits jsonb[] := '{}';
    v_nodes bigint[] := '{}';
    v_picked bigint[] := '{}';
    v_k integer;
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
        -- The batch's own picks are locked by this transaction, which
        -- SKIP LOCKED does not skip, and not held until the end: excluded.
        SELECT p.node_id INTO v_node
          FROM metalloc_pick(r.resource_class, r.traits, r.candidate_nodes, r.owner, r.name,
                             p_start => metalloc_pick_start(v_lo, v_hi), p_exclude => v_picked) p;
        v_ids := v_ids || r.id;
        v_uuids := v_uuids || r.uuid;
        v_created := v_created || r.created_at;
        v_traits := v_traits || to_jsonb(r.traits);
        v_nodes := v_nodes || v_node;
        IF v_node IS NOT NULL THEN
            v_picked := v_picked || v_node;
        END IF;
    END LOOP;
    PERFORM metalloc_reserve_batch(p_me, v_ids, v_uuids, v_traits, v_nodes);
    FOR v_k IN 1..cardinality(v_ids) LOOP
        out_id := v_ids[v_k];
        out_uuid := v_uuids[v_k];
        out_created_at := v_created[v_k];
        out_reserved := v_nodes[v_k] IS NOT NULL;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_claim_reserve_placement(p_me bigint, p_batch integer, p_user_id text, p_consumer_type text)
 RETURNS TABLE(out_id bigint, out_uuid uuid, out_created_at timestamp with time zone, out_reserved boolean)
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
CREATE OR REPLACE FUNCTION metalloc_ironic_claim_hold(p_me bigint, p_batch integer)
 RETURNS TABLE(out_id bigint, out_node_id bigint)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_bitmapscan TO 'off'
 SET enable_sort TO 'off'
 SET jit TO 'off'
AS $$
DECLARE
    r record;
    v_node bigint;
    v_lo bigint;
    v_hi bigint;
BEGIN
    SELECT coalesce(min(n.id), 0), coalesce(max(n.id), 0) INTO v_lo, v_hi FROM nodes n;
    FOR r IN
        SELECT v.*, c.node_id AS held
          FROM (SELECT a.id, a.node_id FROM allocations a
                 WHERE a.state = 'allocating' AND a.conductor_affinity IS NULL AND a.group_id IS NULL
                 ORDER BY a.id
                 LIMIT p_batch
                   FOR UPDATE OF a SKIP LOCKED) c
          CROSS JOIN LATERAL (SELECT q.* FROM allocation_requests q WHERE q.id = c.id OFFSET 0) v
    LOOP
        v_node := r.held;
        IF v_node IS NULL AND NOT EXISTS (SELECT 1 FROM ironic_allocations j
                                           WHERE j.uuid = r.uuid AND j.state = 'deleting') THEN
            SELECT p.node_id INTO v_node
              FROM metalloc_pick(r.resource_class, r.traits, r.candidate_nodes, r.owner, r.name,
                                 p_start => metalloc_pick_start(v_lo, v_hi)) p;
        END IF;
        UPDATE allocations a SET conductor_affinity = p_me, node_id = v_node WHERE a.id = r.id;
        IF v_node IS NOT NULL AND r.held IS NULL THEN
            PERFORM metalloc_hold(v_node, r.id, r.uuid, r.traits);
        END IF;
        IF v_node IS NOT NULL AND metalloc_ironic_intent(r.id, p_me, v_node) IS DISTINCT FROM -1 THEN
            out_node_id := v_node;
        ELSE
            out_node_id := NULL;
        END IF;
        out_id := r.id;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION allocations_events_created()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO allocation_events (kind, allocation_uuid, name, state, resource_class, owner, node_uuid, last_error)
    SELECT 'created', r.uuid, r.name, r.state, r.resource_class, r.owner, n.uuid, r.last_error
      FROM new_rows r LEFT JOIN nodes n ON n.id = r.node_id
     ORDER BY r.id;
    PERFORM pg_notify('metalloc_allocation_events', r.uuid::text || ' ' || r.state)
       FROM new_rows r
      ORDER BY r.id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
