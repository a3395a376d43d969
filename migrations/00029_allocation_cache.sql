-- +goose Up
-- Kind: expand. The notification payload gains fields after the first two,
-- which is all an API built for 00028 reads.
-- What an API process needs to answer GET /v1/allocations/{uuid} and
-- Prefer: wait from memory (allocation.Hub's cache, issue 29), carried
-- by the allocation notifications (channel metalloc_allocation_events):
--
--   '<uuid> <state>'                      created, state changed (as before)
--   '<uuid> deleted'                      deleted (as before)
--   '<uuid> active <node uuid> <µs>'      reserved: the node and updated_at
--                                         (microseconds since the epoch)
--   '<uuid> <state> *'                    the name or extra changed (no
--                                         event row: streams have no such
--                                         event)
--
-- An API reading the first two fields only (before this migration) sees
-- the same states.

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
                      r.uuid::text || ' ' || CASE WHEN k = 'deleted' THEN k ELSE r.state END
                      || CASE WHEN k = 'updated' AND r.state = 'active' AND node IS NOT NULL AND r.updated_at IS NOT NULL
                              THEN ' ' || node::text || ' '
                                   || (extract(epoch FROM r.updated_at) * 1000000)::bigint::text
                              ELSE '' END);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION allocations_notify_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('metalloc_allocation_events', NEW.uuid::text || ' ' || NEW.state || ' *');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER allocations_notify_changed AFTER UPDATE OF name, extra ON allocations
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name OR OLD.extra IS DISTINCT FROM NEW.extra)
    EXECUTE FUNCTION allocations_notify_changed();

-- +goose Down
DROP TRIGGER allocations_notify_changed ON allocations;
DROP FUNCTION allocations_notify_changed();
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
