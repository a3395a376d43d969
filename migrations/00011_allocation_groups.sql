-- +goose Up
-- Kind: expand. A new table, a nullable column, a widened check constraint and
-- a function body.
-- Allocation groups (gang allocation, package allocgroup): N nodes all or
-- nothing, placed inside one topology domain. A group goes allocating ->
-- active when every member is reserved, in one transaction, or allocating
-- -> error with no member at all. Growing (PATCH count up) moves an active
-- group back to allocating; the conductor adds the missing members, or
-- returns it to active with count = its members and a last_error. Members
-- are ordinary allocation rows (allocations.group_id), inserted already
-- active by the transaction that locks their nodes and activates the group.
CREATE TABLE allocation_groups (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid uuid NOT NULL UNIQUE,
    name text UNIQUE,
    state text NOT NULL DEFAULT 'allocating' CHECK (state IN ('allocating', 'active', 'error')),
    last_error text,
    -- the members wanted; while allocating, count minus the members is
    -- what the conductor still has to reserve.
    count integer NOT NULL CHECK (count > 0),
    resource_class text NOT NULL,
    traits text[] NOT NULL DEFAULT '{}',
    candidate_nodes uuid[],
    owner text,
    extra jsonb NOT NULL DEFAULT '{}',
    rule text NOT NULL DEFAULT 'none' CHECK (rule IN ('none', 'required', 'preferred')),
    -- the topology level name the rule applies to (NULL for none).
    rule_level text CHECK ((rule = 'none') = (rule_level IS NULL)),
    -- the domain the members were placed in (path prefix, coarse to fine;
    -- NULL when the placement spans domains): where a grow goes.
    domain text[],
    conductor_affinity bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz
);
-- The claim's scan, as allocations_allocating_idx.
CREATE INDEX allocation_groups_allocating_idx ON allocation_groups (id) WHERE state = 'allocating';

ALTER TABLE allocations ADD COLUMN group_id bigint REFERENCES allocation_groups (id);
CREATE INDEX allocations_group_idx ON allocations (group_id) WHERE group_id IS NOT NULL;

-- +goose StatementBegin
-- error is final; active and allocating alternate (grow).
CREATE FUNCTION allocation_groups_state_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state <> OLD.state AND OLD.state = 'error' THEN
        RAISE EXCEPTION 'allocation group % cannot move from % to %', OLD.uuid, OLD.state, NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER allocation_groups_state_guard BEFORE UPDATE OF state ON allocation_groups
    FOR EACH ROW WHEN (NEW.state <> OLD.state AND OLD.state = 'error')
    EXECUTE FUNCTION allocation_groups_state_guard();

-- Unowned allocating groups wake the conductors (allocations_notify, the
-- same channel as allocations): created, grown, or released on a clean stop.
CREATE TRIGGER allocation_groups_notify_insert AFTER INSERT ON allocation_groups
    FOR EACH ROW WHEN (NEW.state = 'allocating' AND NEW.conductor_affinity IS NULL)
    EXECUTE FUNCTION allocations_notify();
CREATE TRIGGER allocation_groups_notify_update AFTER UPDATE OF state, conductor_affinity ON allocation_groups
    FOR EACH ROW WHEN (NEW.state = 'allocating' AND NEW.conductor_affinity IS NULL
                       AND (OLD.state <> 'allocating' OR OLD.conductor_affinity IS NOT NULL))
    EXECUTE FUNCTION allocations_notify();

-- Group events share the allocation event log (GET /v1/allocations/events):
-- kinds group_created, group_updated (the state changed) and group_deleted,
-- allocation_uuid holding the group's uuid.
ALTER TABLE allocation_events DROP CONSTRAINT allocation_events_kind_check;
ALTER TABLE allocation_events ADD CONSTRAINT allocation_events_kind_check
    CHECK (kind IN ('created', 'updated', 'deleted', 'group_created', 'group_updated', 'group_deleted'));

-- +goose StatementBegin
-- Records a group's creation, state change or deletion in allocation_events
-- and wakes the API processes (Prefer: wait on the group's uuid, streams).
CREATE FUNCTION allocation_groups_event() RETURNS trigger
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
CREATE TRIGGER allocation_groups_event AFTER INSERT OR DELETE ON allocation_groups
    FOR EACH ROW EXECUTE FUNCTION allocation_groups_event();
CREATE TRIGGER allocation_groups_event_state AFTER UPDATE OF state ON allocation_groups
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION allocation_groups_event();

-- +goose StatementBegin
-- The one deallocation, now aware of groups: releasing a member lowers its
-- group's count (DELETE /v1/allocations/{member}, node delete, tear down),
-- and releasing the last member deletes the group. The caller locked the
-- node; the allocation row is locked by the DELETE, then the group by the
-- UPDATE (the lock order: nodes, allocations, groups).
CREATE OR REPLACE FUNCTION metalloc_deallocate(p_allocation_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    g bigint;
BEGIN
    UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL, updated_at = now()
     WHERE allocation_id = p_allocation_id;
    DELETE FROM allocations WHERE id = p_allocation_id RETURNING group_id INTO g;
    IF g IS NOT NULL THEN
        UPDATE allocation_groups SET count = count - 1, updated_at = now() WHERE id = g AND count > 1;
        IF NOT FOUND THEN
            DELETE FROM allocation_groups
             WHERE id = g AND NOT EXISTS (SELECT 1 FROM allocations a WHERE a.group_id = g);
        END IF;
    END IF;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_deallocate(p_allocation_id bigint) RETURNS void
LANGUAGE sql AS $$
    UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL, updated_at = now()
     WHERE allocation_id = p_allocation_id;
    DELETE FROM allocations WHERE id = p_allocation_id;
$$;
-- +goose StatementEnd
DROP TRIGGER allocation_groups_event_state ON allocation_groups;
DROP TRIGGER allocation_groups_event ON allocation_groups;
DROP FUNCTION allocation_groups_event();
DELETE FROM allocation_events WHERE kind LIKE 'group_%';
ALTER TABLE allocation_events DROP CONSTRAINT allocation_events_kind_check;
ALTER TABLE allocation_events ADD CONSTRAINT allocation_events_kind_check
    CHECK (kind IN ('created', 'updated', 'deleted'));
DROP INDEX allocations_group_idx;
ALTER TABLE allocations DROP COLUMN group_id;
DROP TABLE allocation_groups;
DROP FUNCTION allocation_groups_state_guard();
