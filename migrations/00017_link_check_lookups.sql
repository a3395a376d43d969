-- +goose Up
-- Kind: expand. A function body only.
-- The deferred check that an active allocation and its node name each
-- other (allocation_node_link_check, at every commit that reserves or
-- links a node) read both rows with a join. PL/pgSQL keeps a session's
-- plan for it, and a session that first planned it while allocations was
-- small kept a hash join over a sequential scan of allocations: the
-- longer a conductor ran, the dearer each reservation (1.3 ms and 15
-- buffers per check at 5,000 allocations, auto_explain). Two primary-key
-- lookups have no other plan. The outcome is the same: a row deleted or
-- unlinked since the change is not checked; otherwise the other side must
-- name it back.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION allocation_node_link_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_uuid uuid;
    ok boolean;
BEGIN
    IF TG_TABLE_NAME = 'allocations' THEN
        -- The allocation as it is now (NEW is the row as the event left it).
        SELECT a.node_id, a.uuid INTO v_id, v_uuid FROM allocations a WHERE a.id = NEW.id;
        IF v_id IS NULL THEN
            RETURN NULL;
        END IF;
        SELECT n.allocation_id = NEW.id AND n.instance_uuid = v_uuid INTO ok FROM nodes n WHERE n.id = v_id;
        IF ok IS DISTINCT FROM true THEN
            RAISE EXCEPTION 'allocation % names node % which does not hold it', v_uuid, v_id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    ELSE
        SELECT n.allocation_id, n.instance_uuid INTO v_id, v_uuid FROM nodes n WHERE n.id = NEW.id;
        IF v_id IS NULL THEN
            RETURN NULL;
        END IF;
        SELECT a.node_id = NEW.id AND a.uuid = v_uuid INTO ok FROM allocations a WHERE a.id = v_id;
        IF ok IS DISTINCT FROM true THEN
            RAISE EXCEPTION 'node % names allocation % which does not name it back', NEW.uuid, v_id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION allocation_node_link_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ok boolean;
BEGIN
    IF TG_TABLE_NAME = 'allocations' THEN
        IF NEW.node_id IS NULL THEN
            RETURN NULL;
        END IF;
        SELECT n.allocation_id = a.id AND n.instance_uuid = a.uuid INTO ok
          FROM allocations a JOIN nodes n ON n.id = a.node_id
         WHERE a.id = NEW.id;
        IF ok IS DISTINCT FROM true AND EXISTS (SELECT 1 FROM allocations WHERE id = NEW.id) THEN
            RAISE EXCEPTION 'allocation % names node % which does not hold it', NEW.uuid, NEW.node_id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    ELSE
        IF NEW.allocation_id IS NULL THEN
            RETURN NULL;
        END IF;
        SELECT a.node_id = n.id AND n.instance_uuid = a.uuid INTO ok
          FROM nodes n JOIN allocations a ON a.id = n.allocation_id
         WHERE n.id = NEW.id;
        IF ok IS DISTINCT FROM true AND EXISTS (SELECT 1 FROM nodes WHERE id = NEW.id) THEN
            RAISE EXCEPTION 'node % names allocation % which does not name it back', NEW.uuid, NEW.allocation_id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
