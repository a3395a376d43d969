-- +goose Up
-- Kind: expand. metalloc_pick gains an argument, but only the database's own
-- functions (replaced here too) call it; no binary does.
-- The placement backend's claim writes Placement's rows for its whole
-- batch in one statement (issue 29: the placement backend at 80 % of the
-- database backend). metalloc_claim_reserve_placement used to run, for
-- each row of the batch, its pick, one statement for the consumer, the
-- allocation, the provider's generation and the claim log, then the
-- reservation. It now picks a node for every row first (node and
-- provider locked together, SKIP LOCKED, as before), then writes
-- Placement's rows of all the picks in one statement, under every picked
-- provider's lock and in a snapshot taken after them, then reserves each
-- row whose allocation was written. Measured claim by claim without
-- contention (10,000 nodes, batches of 8, half the allocations with a
-- trait), that is 35 us of the database's CPU less per allocation, out of
-- 335 (the database backend's claim: 190). The lock order per row
-- is the same (node, then its provider, then the allocation row's update
-- and the node's), only the batch's picks all come before its writes.
--
-- A batch's own picks are locked by its transaction, which SKIP LOCKED
-- does not skip, and they are not held (metalloc_hold) until the end:
-- metalloc_pick takes p_exclude, node ids its walk with a Placement class
-- skips.

-- +goose StatementBegin
DROP FUNCTION metalloc_pick(text, text[], uuid[], text, text, integer, bigint);
-- +goose StatementEnd

-- +goose StatementBegin
-- Picks and locks (FOR UPDATE SKIP LOCKED: never waiting for a node others
-- hold) a free node of p_resource_class with every trait of p_traits, in
-- the scope of p_candidates and p_owner: the node named p_name if it fits
-- (Ironic's name-first rule), else a random one of p_candidates, else the
-- first fitting node from a random node id on (p_start, drawn with
-- metalloc_pick_start; NULL: drawn here), wrapping around to the lowest.
-- With p_placement_class (a placement.resource_classes id; p_candidates
-- and p_name must be NULL), only nodes whose resource provider (same uuid,
-- flat: no parent, no children) has an inventory of that class with room
-- for one unit (metalloc_placement_fits) and every trait of p_traits
-- qualify, the provider is locked with the node (provider_id), and the
-- nodes of p_exclude are skipped (the placement claim's earlier picks in
-- its batch, which its own locks do not hide). No node: node_id NULL.
CREATE FUNCTION metalloc_pick(p_resource_class text, p_traits text[], p_candidates uuid[], p_owner text, p_name text, p_placement_class integer DEFAULT NULL::integer, p_start bigint DEFAULT NULL::bigint, p_exclude bigint[] DEFAULT NULL::bigint[], OUT node_id bigint, OUT node_uuid uuid, OUT provider_id bigint) RETURNS record
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

-- +goose StatementBegin
-- metalloc_claim_reserve for the placement backend in mode local
-- (metalloc-placement on this database): the same claim of up to p_batch
-- rows, and for each row without candidate_nodes whose class Placement
-- knows (metalloc_placement_class) the same pick, restricted to nodes whose
-- flat provider can take one unit with the traits (metalloc_pick with
-- p_placement_class: node and provider locked together, SKIP LOCKED; a
-- Placement API writer locks providers in id order and could otherwise
-- wait for this statement while it waits for them). Then, in one
-- statement for all the picks, under their providers' locks and in a
-- snapshot taken after them, what POST /allocations would write for each
-- new consumer whose provider can still give the unit: the consumer
-- (project = the owner, else p_user_id; generation 1), one allocation of
-- 1 unit, the provider's generation bump, and the claim log
-- (placement_claims). Then each row whose allocation was written is
-- reserved (the row active on the node, metalloc_hold). A row is left
-- claimed but unreserved for the general path (selections through
-- Placement) when it has candidate_nodes, its class is unknown to
-- Placement, no pair is free and unlocked, the capacity was taken
-- meanwhile, or its consumer exists. Lock order, per row: node, then its
-- provider, then the allocation row's update and the node's (the row
-- itself was locked by the claim); every pick of the batch comes before
-- its writes.
CREATE OR REPLACE FUNCTION metalloc_claim_reserve_placement(p_me bigint, p_batch integer, p_user_id text, p_consumer_type text)
RETURNS TABLE (out_id bigint, out_uuid uuid, out_created_at timestamptz, out_reserved boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
SET enable_seqscan = off
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
    FOR v_k IN 1..cardinality(v_rows) LOOP
        r := v_rows[v_k];
        out_reserved := v_nodes[v_k] IS NOT NULL AND r.uuid = ANY (v_written);
        IF out_reserved THEN
            UPDATE allocations a
               SET conductor_affinity = p_me, node_id = v_nodes[v_k], state = 'active',
                   last_error = NULL, updated_at = now()
             WHERE a.id = r.id;
            PERFORM metalloc_hold(v_nodes[v_k], r.id, r.uuid, r.traits);
        ELSE
            UPDATE allocations a SET conductor_affinity = p_me WHERE a.id = r.id;
        END IF;
        out_id := r.id;
        out_uuid := r.uuid;
        out_created_at := r.created_at;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP FUNCTION metalloc_pick(text, text[], uuid[], text, text, integer, bigint, bigint[]);
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION metalloc_pick(p_resource_class text, p_traits text[], p_candidates uuid[], p_owner text, p_name text, p_placement_class integer DEFAULT NULL::integer, p_start bigint DEFAULT NULL::bigint, OUT node_id bigint, OUT node_uuid uuid, OUT provider_id bigint) RETURNS record
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
    r record;
    v_node bigint;
    v_node_uuid uuid;
    v_rp bigint;
    v_rc integer;
    v_classes text[] := '{}';
    v_class_ids integer[] := '{}';
    v_k integer;
    v_consumer bigint;
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
        v_consumer := NULL;
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
            SELECT p.node_id, p.node_uuid, p.provider_id INTO v_node, v_node_uuid, v_rp
              FROM metalloc_pick(r.resource_class, r.traits, NULL, r.owner, NULL, v_rc,
                                 metalloc_pick_start(v_lo, v_hi)) p;
        END IF;
        IF v_node IS NOT NULL THEN
            -- One statement, under the provider's lock and in a snapshot
            -- taken after it (a claim that committed between the pick's
            -- snapshot and the lock is counted): if the provider can
            -- still give the unit, the consumer (none if it exists), its
            -- allocation, the generation bump and the claim log.
            WITH c AS (
                INSERT INTO placement.consumers (uuid, project_id, user_id, consumer_type, generation)
                SELECT r.uuid, coalesce(nullif(r.owner, ''), p_user_id), p_user_id, p_consumer_type, 1
                  FROM placement.inventories inv
                 WHERE inv.resource_provider_id = v_rp AND inv.resource_class_id = v_rc
                   AND metalloc_placement_fits(inv,
                         (SELECT coalesce(sum(a.used), 0) FROM placement.allocations a
                           WHERE a.resource_provider_id = v_rp AND a.resource_class_id = v_rc)::bigint, 1)
                ON CONFLICT (uuid) DO NOTHING
                RETURNING id
            ), a AS (
                INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
                SELECT v_rp, c.id, v_rc, 1 FROM c
                RETURNING consumer_id
            ), g AS (
                UPDATE placement.resource_providers SET generation = generation + 1, updated_at = now()
                 WHERE id = v_rp AND EXISTS (SELECT FROM a)
            ), l AS (
                INSERT INTO placement_claims (consumer_uuid, provider_uuid)
                SELECT r.uuid, v_node_uuid FROM a
                ON CONFLICT (consumer_uuid) DO UPDATE
                   SET provider_uuid = EXCLUDED.provider_uuid, created_at = now()
            )
            SELECT a.consumer_id INTO v_consumer FROM a;
            IF v_consumer IS NULL THEN
                v_node := NULL;
            END IF;
        END IF;
        IF v_node IS NOT NULL THEN
            UPDATE allocations a
               SET conductor_affinity = p_me, node_id = v_node, state = 'active',
                   last_error = NULL, updated_at = now()
             WHERE a.id = r.id;
            PERFORM metalloc_hold(v_node, r.id, r.uuid, r.traits);
        ELSE
            UPDATE allocations a SET conductor_affinity = p_me WHERE a.id = r.id;
        END IF;
        out_id := r.id;
        out_uuid := r.uuid;
        out_created_at := r.created_at;
        out_reserved := v_node IS NOT NULL;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd
