-- +goose Up
-- Kind: expand. New functions only.
-- The Placement backend's fast path in mode local (metalloc-placement on
-- this database): claim allocating rows, pick a node for each, claim it in
-- Placement and reserve it, all in one statement and one transaction, as
-- metalloc_claim_reserve does for the database backend. Before, the batch
-- took a claim transaction, an allocation-candidates query (cached), a
-- selection in Go and a second transaction of three pipelined round trips
-- with a dozen statements: per allocation 2.5 times the database backend's
-- database CPU (10,000 nodes, 5,000 allocations, 32 clients).

-- +goose StatementBegin
-- The Placement resource class of an Ironic node resource class, as Nova's
-- Ironic driver and client.NormalizeClass name it: CUSTOM_ and the class in
-- upper case, each run of characters other than ASCII letters and digits
-- replaced by one underscore.
CREATE FUNCTION metalloc_placement_class(p_resource_class text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN 'CUSTOM_' || upper(regexp_replace(p_resource_class, '[^0-9A-Za-z]+', '_', 'g'));
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether inventory row inv could give p_amount more of its class after
-- p_used already allocated: Placement's check on writing allocations
-- (min_unit, max_unit, step_size, capacity (total - reserved) *
-- allocation_ratio), as placement/allocations_write.go evaluates it.
CREATE FUNCTION metalloc_placement_fits(inv placement.inventories, p_used bigint, p_amount bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN p_amount >= inv.min_unit AND p_amount <= inv.max_unit AND p_amount % inv.step_size = 0
   AND (inv.total - inv.reserved) * inv.allocation_ratio >= p_used + p_amount;
-- +goose StatementEnd

-- +goose StatementBegin
-- metalloc_claim_reserve for the Placement backend in mode local. It claims
-- up to p_batch unowned allocating rows for conductor p_me (the same claim,
-- in id order, skipping rows others hold) and, for each row without
-- candidate_nodes, picks a node that both sides agree on:
--   * free in the database and in the allocation's scope (free_nodes, the
--     owner rule, the node's traits), walked from the random node id
--     p_starts[i] as metalloc_pick does;
--   * whose resource provider (same uuid, a root without children: a flat
--     provider, which is how the resource tracker models a node) has an
--     inventory of the allocation's class (metalloc_placement_class) that
--     can give one more unit (metalloc_placement_fits) and every required
--     trait: the provider GET /allocation_candidates?resources=CLASS:1&
--     required=TRAITS would offer.
-- The node and its provider are locked together, skipping pairs others
-- hold (no waiting: a Placement API writer locks providers in id order and
-- could otherwise wait for this statement while it waits for them). Under
-- the provider's lock the capacity is read again (a fresh snapshot), then
-- it writes what POST /allocations would for a new consumer: the consumer
-- (project = the allocation's owner, else p_user_id; generation 1), one
-- allocation of 1 unit, the provider's generation bump; then the claim log
-- (placement_claims, before the node changes, for the resource tracker)
-- and the reservation (the row active on the node, metalloc_hold).
--
-- A row is left claimed but unreserved (out_reserved false) for the
-- general path (selections through Placement, alternates, Placement's
-- messages) when it has candidate_nodes, its class is unknown to
-- Placement, no pair is free and unlocked (a trait Placement does not know
-- is on no provider), the capacity was
-- taken meanwhile, or its consumer already exists. Lock order: node, then
-- its provider, then the allocation row's update (the row itself was
-- locked by the claim, as in metalloc_claim_reserve).
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

-- +goose Down
DROP FUNCTION metalloc_claim_reserve_placement(bigint, integer, bigint[], text, text);
DROP FUNCTION metalloc_placement_fits(placement.inventories, bigint, bigint);
DROP FUNCTION metalloc_placement_class(text);
