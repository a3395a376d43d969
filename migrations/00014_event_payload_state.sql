-- +goose Up
-- Kind: contract. The allocation event notification's payload changes from
-- '<uuid>' to '<uuid> <state>': an API built for 00013 reads it as a
-- uuid and fails.
-- The allocation event notification (channel metalloc_allocation_events)
-- carries the new state after the uuid: '<uuid> <state>', '<uuid> deleted'
-- for a deletion. An API process's waiters (Prefer: wait) only care about
-- an allocation or group leaving allocating, so the hub wakes them on
-- those alone: before, the 'created' notification of the row a POST had
-- just inserted woke its own waiter for a read that found it still
-- allocating (one wasted read per allocation). The numbering's own
-- notification keeps its empty payload.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION allocations_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r allocations;
    k text;
    node uuid;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD; k := 'deleted';
    ELSIF TG_OP = 'INSERT' THEN
        r := NEW; k := 'created';
    ELSE
        r := NEW; k := 'updated';
    END IF;
    IF r.node_id IS NOT NULL THEN
        SELECT n.uuid INTO node FROM nodes n WHERE n.id = r.node_id;
    END IF;
    INSERT INTO allocation_events (kind, allocation_uuid, name, state, resource_class, owner, node_uuid, last_error)
    VALUES (k, r.uuid, r.name, r.state, r.resource_class, r.owner, node, r.last_error);
    PERFORM pg_notify('metalloc_allocation_events',
                      r.uuid::text || ' ' || CASE WHEN k = 'deleted' THEN k ELSE r.state END);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION allocation_groups_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r allocation_groups;
    k text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD; k := 'group_deleted';
    ELSIF TG_OP = 'INSERT' THEN
        r := NEW; k := 'group_created';
    ELSE
        r := NEW; k := 'group_updated';
    END IF;
    INSERT INTO allocation_events (kind, allocation_uuid, name, state, resource_class, owner, node_uuid, last_error)
    VALUES (k, r.uuid, r.name, r.state, r.resource_class, r.owner, NULL, r.last_error);
    PERFORM pg_notify('metalloc_allocation_events',
                      r.uuid::text || ' ' || CASE WHEN k = 'group_deleted' THEN 'deleted' ELSE r.state END);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION allocations_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r allocations;
    k text;
    node uuid;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD; k := 'deleted';
    ELSIF TG_OP = 'INSERT' THEN
        r := NEW; k := 'created';
    ELSE
        r := NEW; k := 'updated';
    END IF;
    IF r.node_id IS NOT NULL THEN
        SELECT n.uuid INTO node FROM nodes n WHERE n.id = r.node_id;
    END IF;
    INSERT INTO allocation_events (kind, allocation_uuid, name, state, resource_class, owner, node_uuid, last_error)
    VALUES (k, r.uuid, r.name, r.state, r.resource_class, r.owner, node, r.last_error);
    PERFORM pg_notify('metalloc_allocation_events', r.uuid::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION allocation_groups_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r allocation_groups;
    k text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD; k := 'group_deleted';
    ELSIF TG_OP = 'INSERT' THEN
        r := NEW; k := 'group_created';
    ELSE
        r := NEW; k := 'group_updated';
    END IF;
    INSERT INTO allocation_events (kind, allocation_uuid, name, state, resource_class, owner, node_uuid, last_error)
    VALUES (k, r.uuid, r.name, r.state, r.resource_class, r.owner, NULL, r.last_error);
    PERFORM pg_notify('metalloc_allocation_events', r.uuid::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
