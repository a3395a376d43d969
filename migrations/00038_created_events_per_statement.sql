-- +goose Up
-- Kind: expand. Triggers and a new trigger function only.
-- The 'created' events of an INSERT into allocations are written by one
-- statement-level trigger (issue 29: half the work per allocation).
-- metalloc-api inserts the allocations of concurrent POSTs in one
-- statement (allocation.Store's batcher); the row trigger ran
-- allocations_event once per row: a node lookup, an INSERT of one event
-- and a notification each. Measured on a restored 10,000-node database,
-- 2,000 allocations inserted 10 per statement (two runs each): 26-28 us
-- of the database's time per allocation with the row trigger, 16-18 with
-- this one, 9-10 without any event; 3 per statement: 36-41 and 28-34; 1
-- per statement: 59-64 and 59-68, no difference.
--
-- What is written does not change: one 'created' row in allocation_events
-- per allocation, in the order of the allocations' ids (the order their
-- rows were inserted in), and one notification '<uuid> <state>' on
-- metalloc_allocation_events each, in that order. Deletions keep the row
-- trigger (allocations_event, now AFTER DELETE only): metalloc deletes
-- allocations one at a time.

-- +goose StatementBegin
-- The 'created' event and notification of every allocation the INSERT
-- statement wrote (transition table new_rows), in id order.
CREATE FUNCTION allocations_events_created() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO allocation_events (kind, allocation_uuid, name, state, resource_class, owner, node_uuid, last_error)
    SELECT 'created', r.uuid, r.name, r.state, r.resource_class, r.owner, n.uuid, r.last_error
      FROM new_rows r LEFT JOIN nodes n ON n.id = r.node_id
     ORDER BY r.id;
    PERFORM pg_notify('metalloc_allocation_events', r.uuid::text || ' ' || r.state)
       FROM new_rows r
      ORDER BY r.id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER allocations_event ON allocations;
CREATE TRIGGER allocations_event AFTER DELETE ON allocations
    FOR EACH ROW EXECUTE FUNCTION allocations_event();
CREATE TRIGGER allocations_events_created AFTER INSERT ON allocations
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION allocations_events_created();

-- +goose Down
DROP TRIGGER allocations_events_created ON allocations;
DROP FUNCTION allocations_events_created();
DROP TRIGGER allocations_event ON allocations;
CREATE TRIGGER allocations_event AFTER INSERT OR DELETE ON allocations
    FOR EACH ROW EXECUTE FUNCTION allocations_event();
