-- +goose Up
-- Kind: expand. A new table, its functions and triggers.
-- The allocation event log behind GET /v1/allocations/events and the
-- Prefer: wait extension (allocation/events.go). The trigger that changes an
-- allocation writes its event in the same transaction, so an event exists
-- exactly when its change committed.
--
-- Order and resumption. An id taken from a sequence at insert time is not
-- commit-ordered: a transaction can take id 5, another id 6 and commit
-- first, and a reader that delivered 6 would skip 5 for ever. Events are
-- therefore numbered after they commit: metalloc_sequence_allocation_events
-- gives every committed event without a number the next ones (seq), in id
-- order, in a transaction that holds the allocation_events_meta row, so
-- that numberings never overlap and commit one after the other. A reader
-- that saw seq n has seen every seq below it, and "every event after n" is
-- a complete resumption. A transaction that stays open holds back only its
-- own events.
CREATE TABLE allocation_events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- the delivery order, set once committed; NULL until then.
    seq bigint UNIQUE,
    -- the writing transaction's start (now()): pruning by age.
    at timestamptz NOT NULL DEFAULT now(),
    kind text NOT NULL CHECK (kind IN ('created', 'updated', 'deleted')),
    allocation_uuid uuid NOT NULL,
    name text,
    state text NOT NULL,
    resource_class text NOT NULL,
    owner text,
    node_uuid uuid,
    last_error text
);
CREATE INDEX allocation_events_unnumbered ON allocation_events (id) WHERE seq IS NULL;

-- One row: the last seq given (numbering continues from it even when every
-- event was pruned), and the newest seq pruning removed, so that a stream
-- resuming from an older one knows it missed events (GET
-- /v1/allocations/events answers it with a reset event).
CREATE TABLE allocation_events_meta (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    last_seq bigint NOT NULL,
    pruned_seq bigint NOT NULL
);
INSERT INTO allocation_events_meta (last_seq, pruned_seq) VALUES (0, 0);

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
-- Numbers the committed events that have no seq yet, in id order, after the
-- last seq given, and wakes the API processes (NOTIFY
-- metalloc_allocation_events, empty payload) if there were any. The lock on
-- the allocation_events_meta row serializes numberings: one that waited
-- reads the row and the events afresh (READ COMMITTED), after the previous
-- one committed. Returns how many it numbered. Every metalloc-api calls it
-- when woken; the work is tiny and idempotent.
CREATE FUNCTION metalloc_sequence_allocation_events() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    base bigint;
    n bigint;
BEGIN
    SELECT m.last_seq INTO base FROM allocation_events_meta m FOR UPDATE;
    WITH todo AS (
        SELECT e.id, row_number() OVER (ORDER BY e.id) AS rn
          FROM allocation_events e WHERE e.seq IS NULL
    )
    UPDATE allocation_events e SET seq = base + todo.rn FROM todo WHERE e.id = todo.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        UPDATE allocation_events_meta SET last_seq = base + n;
        PERFORM pg_notify('metalloc_allocation_events', '');
    END IF;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Deletes the numbered events older than max_age or beyond the max_rows
-- newest, and records the newest seq deleted in allocation_events_meta.
-- Returns how many it deleted.
CREATE FUNCTION metalloc_prune_allocation_events(max_age interval, max_rows bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    keep_from bigint;
    n bigint;
    newest bigint;
BEGIN
    -- Keep from the first young event on, or from the max_rows-th newest,
    -- whichever keeps fewer.
    SELECT greatest(
        coalesce((SELECT min(e.seq) FROM allocation_events e WHERE e.at >= now() - max_age), m.last_seq + 1),
        m.last_seq - max_rows + 1)
      INTO keep_from FROM allocation_events_meta m;
    WITH gone AS (
        DELETE FROM allocation_events e WHERE e.seq < keep_from RETURNING e.seq
    )
    SELECT count(*), max(g.seq) INTO n, newest FROM gone g;
    IF newest IS NOT NULL THEN
        UPDATE allocation_events_meta SET pruned_seq = greatest(pruned_seq, newest);
    END IF;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION metalloc_prune_allocation_events(interval, bigint);
DROP FUNCTION metalloc_sequence_allocation_events();
DROP TRIGGER allocations_event_state ON allocations;
DROP TRIGGER allocations_event ON allocations;
DROP FUNCTION allocations_event();
DROP TABLE allocation_events_meta;
DROP TABLE allocation_events;
