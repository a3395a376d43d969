-- +goose Up
-- Kind: contract. It drops the claim functions (metalloc_claim_reserve,
-- metalloc_claim_reserve_placement, metalloc_reserve, metalloc_pick) with
-- the signatures a conductor built for 00018 calls.
-- One pick, one projection (issue 24).
--
-- * allocation_requests is what an allocation asks for, as a conductor
--   reads it: its request columns and its traits. Every statement that
--   hands a claimed row to a backend reads it (metalloc_claim_reserve,
--   metalloc_claim_reserve_placement, and conductor/backend/query.sql's
--   ClaimAllocations and ClaimedAllocating), instead of each spelling the
--   columns and the traits subquery again.
-- * metalloc_pick is the one pick: the name-first rule, candidate_nodes,
--   and the walk over free_nodes from a random node id, wrapping around.
--   The start is drawn in SQL, always by metalloc_pick_start (uniform over
--   the node id range): metalloc_pick draws its own, and the claims read the
--   range once per statement and draw one start per row (the range read is
--   two probes of nodes_pkey, a sixth of a pick). With p_placement_class (mode local of the
--   placement backend) the walk also takes the node's flat resource
--   provider with room for one unit of that class and the traits, locked
--   with the node. metalloc_claim_reserve_placement had its own copy of the
--   walk, and the starts were drawn in Go (a cached id range).
-- * metalloc_reserve, metalloc_claim_reserve and
--   metalloc_claim_reserve_placement lose their start arguments and call
--   metalloc_pick. The claims lock their rows first and read them through
--   allocation_requests after (the traits of rows passed over are never
--   aggregated, as since 00008): a lateral subquery per locked row (OFFSET
--   0 keeps it one), so the plan is the locked rows in id order, each read
--   by its primary key, whatever the statistics.

CREATE VIEW allocation_requests AS
SELECT a.id, a.uuid, a.name, a.resource_class, a.candidate_nodes, a.owner, a.created_at,
       (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
          FROM allocation_traits t WHERE t.allocation_id = a.id)::text[] AS traits
  FROM allocations a;

DROP FUNCTION metalloc_claim_reserve(bigint, integer, bigint[]);
DROP FUNCTION metalloc_claim_reserve_placement(bigint, integer, bigint[], text, text);
DROP FUNCTION metalloc_reserve(bigint, bigint, text, text[], uuid[], text, text, bigint);
DROP FUNCTION metalloc_pick(text, text[], uuid[], text, text, bigint);

-- +goose StatementBegin
-- The random node id a pick's walk starts from: uniform over [p_lo, p_hi],
-- the node id range (min(id), max(id) of nodes; 0, 0 when there is none).
-- A plain expression, inlined where it is called.
CREATE FUNCTION metalloc_pick_start(p_lo bigint, p_hi bigint)
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN p_lo + floor(random() * (p_hi - p_lo + 1))::bigint;
-- +goose StatementEnd

-- +goose StatementBegin
-- Picks and locks (FOR UPDATE SKIP LOCKED: never waiting for a node others
-- hold) a free node of p_resource_class with every trait of p_traits, in
-- the scope of p_candidates and p_owner: the node named p_name if it fits
-- (Ironic's name-first rule), else a random one of p_candidates, else the
-- first fitting node from a random node id on, wrapping around to the
-- lowest, so that concurrent conductors spread over the fleet without
-- sorting it. The start is p_start, drawn by the caller with
-- metalloc_pick_start, or, when NULL, drawn here the same way. With p_placement_class (a placement.resource_classes id;
-- p_candidates and p_name must be NULL), only nodes whose resource
-- provider (same uuid, flat: no parent, no children) has an inventory of
-- that class with room for one unit (metalloc_placement_fits) and every
-- trait of p_traits qualify, and the provider is locked with the node
-- (provider_id). No node: node_id NULL.
CREATE FUNCTION metalloc_pick(
    p_resource_class text, p_traits text[], p_candidates uuid[], p_owner text, p_name text,
    p_placement_class integer DEFAULT NULL, p_start bigint DEFAULT NULL,
    OUT node_id bigint, OUT node_uuid uuid, OUT provider_id bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET jit = off
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
-- One reservation attempt for allocation p_allocation_id, owned by
-- conductor p_me: metalloc_pick, then the row active on the node (guarded
-- by conductor_affinity = p_me AND state = 'allocating') and the node
-- holding it (metalloc_hold). No row: no node fits and is unlocked;
-- reserved false: the row is no longer p_me's (the node stays free).
CREATE FUNCTION metalloc_reserve(
    p_allocation_id bigint, p_me bigint, p_resource_class text, p_traits text[],
    p_candidates uuid[], p_owner text, p_name text)
RETURNS TABLE (node_id bigint, node_uuid uuid, reserved boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_alloc uuid;
BEGIN
    SELECT p.node_id, p.node_uuid INTO node_id, node_uuid
      FROM metalloc_pick(p_resource_class, p_traits, p_candidates, p_owner, p_name) p;
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
-- The database backend's fast path: claims up to p_batch unowned allocating
-- rows for conductor p_me (oldest first, skipping rows others hold) and
-- reserves a node for each that metalloc_pick finds one for, in one
-- statement. Rows without a node stay claimed (out_reserved false) for the
-- slow path.
CREATE FUNCTION metalloc_claim_reserve(p_me bigint, p_batch integer)
RETURNS TABLE (out_id bigint, out_uuid uuid, out_created_at timestamptz, out_reserved boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    r record;
    v_node bigint;
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
        SELECT p.node_id INTO v_node
          FROM metalloc_pick(r.resource_class, r.traits, r.candidate_nodes, r.owner, r.name,
                             p_start => metalloc_pick_start(v_lo, v_hi)) p;
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

-- +goose StatementBegin
-- metalloc_claim_reserve for the placement backend in mode local
-- (metalloc-placement on this database): the same claim, and for each row
-- without candidate_nodes whose class Placement knows
-- (metalloc_placement_class) the same pick, restricted to nodes whose flat
-- provider can take one unit with the traits (metalloc_pick with
-- p_placement_class: node and provider locked together, SKIP LOCKED; a
-- Placement API writer locks providers in id order and could otherwise
-- wait for this statement while it waits for them). Under the provider's
-- lock, in a fresh snapshot, it writes what POST /allocations would for a
-- new consumer if the capacity is still there: the consumer (project = the
-- owner, else p_user_id; generation 1), one allocation of 1 unit, the
-- provider's generation bump; then the claim log (placement_claims) and
-- the reservation. A row is left claimed but unreserved for the general
-- path (selections through Placement) when it has candidate_nodes, its
-- class is unknown to Placement, no pair is free and unlocked, the
-- capacity was taken meanwhile, or its consumer exists. Lock order: node,
-- then its provider, then the allocation row's update (the row itself was
-- locked by the claim).
CREATE FUNCTION metalloc_claim_reserve_placement(p_me bigint, p_batch integer, p_user_id text, p_consumer_type text)
RETURNS TABLE (out_id bigint, out_uuid uuid, out_created_at timestamptz, out_reserved boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
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

-- +goose Down
DROP FUNCTION metalloc_claim_reserve_placement(bigint, integer, text, text);
DROP FUNCTION metalloc_claim_reserve(bigint, integer);
DROP FUNCTION metalloc_reserve(bigint, bigint, text, text[], uuid[], text, text);
DROP FUNCTION metalloc_pick(text, text[], uuid[], text, text, integer, bigint);
DROP FUNCTION metalloc_pick_start(bigint, bigint);
DROP VIEW allocation_requests;


-- +goose StatementBegin
CREATE FUNCTION metalloc_pick(
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

-- +goose StatementBegin
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
CREATE FUNCTION metalloc_claim_reserve(p_me bigint, p_batch integer, p_starts bigint[])
RETURNS TABLE (out_id bigint, out_uuid uuid, out_created_at timestamptz, out_reserved boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    r record;
    i integer := 0;
    v_node bigint;
    v_node_uuid uuid;
BEGIN
    FOR r IN
        SELECT c.id, c.uuid, c.name, c.resource_class, c.candidate_nodes, c.owner, c.created_at,
               (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
                  FROM allocation_traits t WHERE t.allocation_id = c.id)::text[] AS traits
          FROM (SELECT a.id, a.uuid, a.name, a.resource_class, a.candidate_nodes, a.owner, a.created_at
                  FROM allocations a
                 WHERE a.state = 'allocating' AND a.conductor_affinity IS NULL
                 ORDER BY a.id
                 LIMIT p_batch
                   FOR UPDATE OF a SKIP LOCKED) c
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
        out_id := r.id;
        out_uuid := r.uuid;
        out_created_at := r.created_at;
        out_reserved := v_node IS NOT NULL;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION metalloc_claim_reserve_placement(p_me bigint, p_batch integer, p_starts bigint[],
    p_user_id text, p_consumer_type text)
RETURNS TABLE (out_id bigint, out_uuid uuid, out_created_at timestamptz, out_reserved boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    r record;
    i integer := 0;
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
    FOR r IN
        SELECT c.id, c.uuid, c.resource_class, c.candidate_nodes, c.owner, c.created_at,
               (SELECT coalesce(array_agg(t.trait ORDER BY t.trait), '{}')
                  FROM allocation_traits t WHERE t.allocation_id = c.id)::text[] AS traits
          FROM (SELECT a.id, a.uuid, a.resource_class, a.candidate_nodes, a.owner, a.created_at
                  FROM allocations a
                 WHERE a.state = 'allocating' AND a.conductor_affinity IS NULL
                 ORDER BY a.id
                 LIMIT p_batch
                   FOR UPDATE OF a SKIP LOCKED) c
    LOOP
        i := i + 1;
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
            FOR pass IN 1..2 LOOP
                IF pass = 1 THEN
                    v_lo := coalesce(p_starts[i], 0); v_hi := 9223372036854775807;
                ELSE
                    v_lo := -9223372036854775808; v_hi := coalesce(p_starts[i], 0);
                END IF;
                SELECT n.id, n.uuid, rp.id INTO v_node, v_node_uuid, v_rp
                  FROM free_nodes n
                  JOIN placement.resource_providers rp ON rp.uuid = n.uuid
                  JOIN placement.inventories inv ON inv.resource_provider_id = rp.id
                                                AND inv.resource_class_id = v_rc
                 WHERE n.resource_class = r.resource_class
                   AND n.id >= v_lo AND n.id < v_hi
                   AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, r.owner)
                   AND metalloc_node_has_traits(n.traits, r.traits)
                   AND rp.parent_provider_id IS NULL
                   AND NOT EXISTS (SELECT 1 FROM placement.resource_providers ch
                                    WHERE ch.parent_provider_id = rp.id)
                   AND metalloc_placement_fits(inv,
                         (SELECT coalesce(sum(a.used), 0) FROM placement.allocations a
                           WHERE a.resource_provider_id = rp.id AND a.resource_class_id = v_rc)::bigint, 1)
                   AND (cardinality(r.traits) = 0
                        OR r.traits <@ ARRAY(SELECT t.name FROM placement.resource_provider_traits pt
                                               JOIN placement.traits t ON t.id = pt.trait_id
                                              WHERE pt.resource_provider_id = rp.id))
                 ORDER BY n.id
                 LIMIT 1
                   FOR UPDATE OF n, rp SKIP LOCKED;
                EXIT WHEN v_node IS NOT NULL;
            END LOOP;
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
