-- +goose Up
-- metalloc_hold and metalloc_deallocate become PL/pgSQL functions, with the
-- same bodies. A LANGUAGE sql function that is not inlined (these update and
-- delete rows) is parsed and planned again at every call from a new query:
-- its plans live only as long as the calling statement. PL/pgSQL keeps its
-- statements' plans for the session. Every reservation calls metalloc_hold
-- and every deletion metalloc_deallocate, and the re-planning was a third of
-- their time (pg_stat_statements, 10,000 nodes, 5,000 allocations, 32
-- clients: 1.34 ms per metalloc_hold call against 0.76 ms for its UPDATE;
-- 3,000 calls of metalloc_deallocate in a row: 3 s as PL/pgSQL, 9 s as SQL).

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_hold(p_node_id bigint, p_allocation_id bigint, p_uuid uuid, p_traits text[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE nodes n
       SET instance_uuid = p_uuid, allocation_id = p_allocation_id,
           instance_info = n.instance_info || jsonb_build_object('traits', to_jsonb(p_traits)),
           updated_at = now()
     WHERE n.id = p_node_id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_deallocate(p_allocation_id bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL, updated_at = now()
     WHERE allocation_id = p_allocation_id;
    DELETE FROM allocations WHERE id = p_allocation_id;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_hold(p_node_id bigint, p_allocation_id bigint, p_uuid uuid, p_traits text[])
RETURNS void
LANGUAGE sql AS $$
    UPDATE nodes n
       SET instance_uuid = p_uuid, allocation_id = p_allocation_id,
           instance_info = n.instance_info || jsonb_build_object('traits', to_jsonb(p_traits)),
           updated_at = now()
     WHERE n.id = p_node_id;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_deallocate(p_allocation_id bigint)
RETURNS void
LANGUAGE sql AS $$
    UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL, updated_at = now()
     WHERE allocation_id = p_allocation_id;
    DELETE FROM allocations WHERE id = p_allocation_id;
$$;
-- +goose StatementEnd
