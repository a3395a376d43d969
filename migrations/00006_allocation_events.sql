-- +goose Up
-- The allocation event log behind GET /v1/allocations/events and the
-- Prefer: wait extension (allocation/events.go). The trigger that changes an
-- allocation writes its event in the same transaction, so an event exists
-- exactly when its change committed.
--
-- Order and resumption. A plain sequence is not commit-ordered: a
-- transaction can take id 5, another id 6 and commit first, and a reader
-- that delivered 6 would skip 5 for ever. Events are therefore ordered by
-- (xid, id): the writing transaction's id (pg_current_xact_id, 64-bit, never
-- wraps), then a sequence within it; and a reader only delivers events whose
-- transaction id is below its snapshot's xmin (pg_snapshot_xmin): every
-- transaction older than that has ended, and every transaction that has not
-- yet ended or not yet started has a larger id. An event delivered is thus
-- never followed by one that sorts before it, and "everything after (xid,
-- id)" is a complete resumption. The price: while some transaction that
-- started earlier is still open (in any database of the cluster), later
-- events wait for it to end.
CREATE TABLE allocation_events (
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    id bigint GENERATED ALWAYS AS IDENTITY,
    -- the writing transaction's start (now()): pruning by age.
    at timestamptz NOT NULL DEFAULT now(),
    kind text NOT NULL CHECK (kind IN ('created', 'updated', 'deleted')),
    allocation_uuid uuid NOT NULL,
    name text,
    state text NOT NULL,
    resource_class text NOT NULL,
    owner text,
    node_uuid uuid,
    last_error text,
    PRIMARY KEY (xid, id)
);

-- One row: the newest event key pruning removed, so that a stream resuming
-- from an older key knows it missed events (GET /v1/allocations/events
-- answers it with a reset event).
CREATE TABLE allocation_events_pruned (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    xid xid8 NOT NULL,
    id bigint NOT NULL
);
INSERT INTO allocation_events_pruned (xid, id) VALUES ('0', 0);

-- +goose StatementBegin
-- Records an allocation's creation, state change or deletion in
-- allocation_events and wakes the API processes (LISTEN
-- metalloc_allocation_events; the payload is the allocation's uuid, far
-- below NOTIFY's 8000-byte limit). A separate channel from
-- metalloc_allocations, so that conductors are not woken by every
-- activation.
CREATE FUNCTION allocations_event() RETURNS trigger
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
CREATE TRIGGER allocations_event AFTER INSERT OR DELETE ON allocations
    FOR EACH ROW EXECUTE FUNCTION allocations_event();
CREATE TRIGGER allocations_event_state AFTER UPDATE OF state ON allocations
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION allocations_event();

-- +goose StatementBegin
-- Deletes the oldest events, in (xid, id) order, that are older than max_age
-- or beyond the max_rows newest, never one a reader could still be waiting
-- to deliver (xid at or above the snapshot's xmin); records the newest key
-- deleted in allocation_events_pruned. Returns how many it deleted.
CREATE FUNCTION metalloc_prune_allocation_events(max_age interval, max_rows bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    horizon xid8 := pg_snapshot_xmin(pg_current_snapshot());
    bx xid8;
    bi bigint;
    cx xid8;
    ci bigint;
    n bigint;
BEGIN
    -- Keep from the first young event on ...
    SELECT e.xid, e.id INTO bx, bi FROM allocation_events e
     WHERE e.at >= now() - max_age ORDER BY e.xid, e.id LIMIT 1;
    IF NOT FOUND THEN
        bx := horizon; bi := 0;
    END IF;
    -- ... or from the max_rows-th newest, whichever keeps fewer.
    SELECT e.xid, e.id INTO cx, ci FROM allocation_events e
     ORDER BY e.xid DESC, e.id DESC OFFSET greatest(max_rows - 1, 0) LIMIT 1;
    IF FOUND AND (cx, ci) > (bx, bi) THEN
        bx := cx; bi := ci;
    END IF;
    WITH gone AS (
        DELETE FROM allocation_events e
         WHERE (e.xid, e.id) < (bx, bi) AND e.xid < horizon
        RETURNING e.xid, e.id
    ), newest AS (
        SELECT g.xid, g.id FROM gone g ORDER BY g.xid DESC, g.id DESC LIMIT 1
    ), mark AS (
        UPDATE allocation_events_pruned p SET xid = newest.xid, id = newest.id
          FROM newest WHERE (newest.xid, newest.id) > (p.xid, p.id)
    )
    SELECT count(*) INTO n FROM gone;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION metalloc_prune_allocation_events(interval, bigint);
DROP TRIGGER allocations_event_state ON allocations;
DROP TRIGGER allocations_event ON allocations;
DROP FUNCTION allocations_event();
DROP TABLE allocation_events_pruned;
DROP TABLE allocation_events;
