-- +goose Up
-- Kind: expand. New functions only.
-- DELETE /v1/allocations/{id} (and DELETE /v1/nodes/{node}/allocation) in
-- one statement: lock the node, check that it may lose its allocation, lock
-- the allocation and deallocate it if it still names that node. Before, the
-- API ran BEGIN, the node lock, metalloc_deallocate_if and COMMIT: four
-- round trips after the lookup, where there is now one.

-- +goose StatementBegin
-- Whether a node's allocation may not be removed now (Ironic's
-- verify_node_for_deallocation): never blocked in maintenance; otherwise
-- blocked while the node is active, or in a transitional state (a target
-- provision state set) that is not one of p_update_allowed (Ironic's
-- UPDATE_ALLOWED_STATES, which the API passes: node.UpdateAllowedStates).
-- allocation.CheckDeallocation says the same in Ironic's words; a test
-- checks both agree.
CREATE FUNCTION metalloc_deallocation_blocked(p_provision_state text, p_target text, p_maintenance boolean,
                                              p_update_allowed text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN NOT p_maintenance
       AND ((coalesce(p_target, '') <> '' AND NOT p_provision_state = ANY (p_update_allowed))
            OR p_provision_state = 'active');
-- +goose StatementEnd

-- +goose StatementBegin
-- Deallocates allocation p_id, which an unlocked read found on node
-- p_node_id (NULL: none), taking the locks in the documented order (node,
-- then allocation). outcome:
--   'deleted'  done;
--   'gone'     the allocation no longer exists;
--   'moved'    it no longer names p_node_id, or that node is gone: read
--              again and retry;
--   'blocked'  the node may not lose its allocation now
--              (metalloc_deallocation_blocked); nothing changed.
-- The node's uuid, provision state, target and maintenance come back for
-- the caller's message.
CREATE FUNCTION metalloc_destroy_allocation(p_id bigint, p_node_id bigint, p_update_allowed text[],
                                            OUT outcome text, OUT node_uuid uuid, OUT provision_state text,
                                            OUT target_provision_state text, OUT maintenance boolean)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_node_id IS NOT NULL THEN
        SELECT n.uuid, n.provision_state, n.target_provision_state, n.maintenance
          INTO node_uuid, provision_state, target_provision_state, maintenance
          FROM nodes n WHERE n.id = p_node_id FOR UPDATE;
        IF NOT FOUND THEN
            outcome := 'moved'; -- deleted, and the allocation with it
            RETURN;
        END IF;
        IF metalloc_deallocation_blocked(provision_state, target_provision_state, maintenance, p_update_allowed) THEN
            outcome := 'blocked';
            RETURN;
        END IF;
    END IF;
    outcome := metalloc_deallocate_if(p_id, p_node_id);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- metalloc_destroy_allocation for a batch of deletions in one transaction
-- (the API's DELETEs share it: allocation.Store.Destroy). Row ord is
-- (p_ids[ord], p_node_ids[ord]; 0 for none). Every node of the batch is
-- locked first, in id order, before any allocation or group: the batch
-- then never waits for a node while it holds an allocation or a group (a
-- group reservation holds its nodes and waits for its group), and two
-- batches lock their nodes in the same order. Then each row as one
-- deletion would, those with a node first.
CREATE FUNCTION metalloc_destroy_allocations(p_ids bigint[], p_node_ids bigint[], p_update_allowed text[],
                                             OUT ord integer, OUT outcome text, OUT node_uuid uuid,
                                             OUT provision_state text, OUT target_provision_state text,
                                             OUT maintenance boolean)
RETURNS SETOF record
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    d record;
BEGIN
    PERFORM 1 FROM nodes n WHERE n.id = ANY (p_node_ids) ORDER BY n.id FOR UPDATE;
    FOR r IN
        SELECT k AS ord, p_ids[k] AS id, nullif(p_node_ids[k], 0) AS node_id
          FROM generate_subscripts(p_ids, 1) k
         ORDER BY nullif(p_node_ids[k], 0) IS NULL, p_node_ids[k], p_ids[k], k
    LOOP
        d := metalloc_destroy_allocation(r.id, r.node_id, p_update_allowed);
        ord := r.ord;
        outcome := d.outcome;
        node_uuid := d.node_uuid;
        provision_state := d.provision_state;
        target_provision_state := d.target_provision_state;
        maintenance := d.maintenance;
        RETURN NEXT;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION metalloc_destroy_allocations(bigint[], bigint[], text[]);
DROP FUNCTION metalloc_destroy_allocation(bigint, bigint, text[]);
DROP FUNCTION metalloc_deallocation_blocked(text, text, boolean, text[]);
