-- +goose Up
-- Kind: contract. It drops metalloc_claim_reserve and creates it again with
-- other results: a conductor built for 00001 cannot call it any more.
-- metalloc_claim_reserve returns the uuid and created_at of the rows it
-- claimed itself. Before, the caller joined the function's ids back to
-- allocations in the same statement; that join reads with the statement's
-- snapshot, while the function's own SELECT takes a newer one, so a row
-- inserted in between was claimed but not returned, and stayed allocating and
-- owned until the conductor restarted.
DROP FUNCTION metalloc_claim_reserve(bigint, integer, bigint[]);

-- +goose StatementBegin
-- The conductors' fast path: claims up to p_batch unowned allocating rows for
-- p_me (oldest first, FOR UPDATE SKIP LOCKED) and, in the same transaction,
-- reserves a node for each one that has an unlocked fitting node
-- (metalloc_pick with the random start p_starts[i]): the row is claimed and
-- activated by a single update. Rows with no node free right now are only
-- claimed (out_reserved = false) and left to the conductor's slower path
-- (retry, or error with an explanation), which reads them afresh. One result
-- row per claimed allocation. If the conductor dies, the
-- transaction rolls back and the rows stay unclaimed for the others.
CREATE FUNCTION metalloc_claim_reserve(p_me bigint, p_batch integer, p_starts bigint[])
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

-- +goose Down
DROP FUNCTION metalloc_claim_reserve(bigint, integer, bigint[]);

-- +goose StatementBegin
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
