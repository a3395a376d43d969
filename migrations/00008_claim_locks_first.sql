-- +goose Up
-- Kind: expand. A function body and storage parameters only.
-- metalloc_claim_reserve reads an allocation's traits only once it holds the
-- row. Before, the traits subquery sat in the same SELECT as FOR UPDATE SKIP
-- LOCKED, below the row locking: every row a claim passed over because
-- another worker held it still had its traits aggregated. With 2 conductors
-- x 16 workers, a claim passes over the rows of every batch in flight, and
-- this was half of the claim's buffer reads (pg_stat_statements: 121 buffers
-- per claim SELECT, 10,000 nodes, 5,000 allocations, 32 clients).
--
-- Its plan no longer depends on statistics either: allocations grows from
-- empty, and a plan made before the table has statistics (or with ones taken
-- when few rows were allocating) may be a bitmap scan of
-- allocations_allocating_idx plus a sort. A bitmap scan never marks the
-- entries of rows that left the allocating state as dead, so every claim
-- reads all of them and their heap pages until the next vacuum: the claim
-- grows with the allocations made since. The index scan in id order, which
-- the settings below leave as the only plan, marks them on its first pass
-- and skips them afterwards.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_claim_reserve(p_me bigint, p_batch integer, p_starts bigint[])
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

-- The allocations table is a work queue: every allocation leaves a dead
-- entry in allocations_allocating_idx when it is reserved, and one in every
-- index when it is deleted. Vacuum it after 2% of it changed (default 20%),
-- without cost-based sleeping, and analyze it after 5% (default 10%); nodes
-- and node_traits grow from nothing by bulk enrolment and change state
-- with every allocation: analyze them after 5%.
ALTER TABLE allocations SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 200,
    autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_insert_threshold = 200,
    autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE nodes SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE node_traits SET (autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_insert_scale_factor = 0.05);

-- +goose Down
ALTER TABLE allocations RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
    autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_delay);
ALTER TABLE nodes RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_cost_delay);
ALTER TABLE node_traits RESET (autovacuum_analyze_scale_factor, autovacuum_vacuum_insert_scale_factor);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_claim_reserve(p_me bigint, p_batch integer, p_starts bigint[])
RETURNS TABLE (out_id bigint, out_uuid uuid, out_created_at timestamptz, out_reserved boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    i integer := 0;
    v_node bigint;
    v_node_uuid uuid;
BEGIN
    FOR r IN
        SELECT a.id, a.uuid, a.name, a.resource_class, a.candidate_nodes, a.owner, a.created_at,
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
        out_id := r.id;
        out_uuid := r.uuid;
        out_created_at := r.created_at;
        out_reserved := v_node IS NOT NULL;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd
