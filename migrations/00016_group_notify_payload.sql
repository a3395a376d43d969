-- +goose Up
-- Kind: expand. The group notification gets a payload that a conductor built
-- for 00015 ignores (it wakes on any notification).
-- Unowned allocating groups wake the conductors with the payload 'group'
-- on their channel (metalloc_allocations), where allocations notify with
-- an empty payload. A conductor then claims groups only when a group
-- notification (or its poll tick, or a reconnection) says there may be
-- one: before, every worker ran a group claim after every allocation
-- claim round, about two statements per allocation finding nothing.

-- +goose StatementBegin
CREATE FUNCTION allocation_groups_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('metalloc_allocations', 'group');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER allocation_groups_notify_insert ON allocation_groups;
DROP TRIGGER allocation_groups_notify_update ON allocation_groups;
CREATE TRIGGER allocation_groups_notify_insert AFTER INSERT ON allocation_groups
    FOR EACH ROW WHEN (NEW.state = 'allocating' AND NEW.conductor_affinity IS NULL)
    EXECUTE FUNCTION allocation_groups_notify();
CREATE TRIGGER allocation_groups_notify_update AFTER UPDATE OF state, conductor_affinity ON allocation_groups
    FOR EACH ROW WHEN (NEW.state = 'allocating' AND NEW.conductor_affinity IS NULL
                       AND (OLD.state <> 'allocating' OR OLD.conductor_affinity IS NOT NULL))
    EXECUTE FUNCTION allocation_groups_notify();

-- +goose Down
DROP TRIGGER allocation_groups_notify_insert ON allocation_groups;
DROP TRIGGER allocation_groups_notify_update ON allocation_groups;
CREATE TRIGGER allocation_groups_notify_insert AFTER INSERT ON allocation_groups
    FOR EACH ROW WHEN (NEW.state = 'allocating' AND NEW.conductor_affinity IS NULL)
    EXECUTE FUNCTION allocations_notify();
CREATE TRIGGER allocation_groups_notify_update AFTER UPDATE OF state, conductor_affinity ON allocation_groups
    FOR EACH ROW WHEN (NEW.state = 'allocating' AND NEW.conductor_affinity IS NULL
                       AND (OLD.state <> 'allocating' OR OLD.conductor_affinity IS NOT NULL))
    EXECUTE FUNCTION allocations_notify();
DROP FUNCTION allocation_groups_notify();
