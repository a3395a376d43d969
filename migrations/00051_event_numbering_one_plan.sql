-- +goose Up
-- Kind: expand. The same function (name, arguments, result, behaviour)
-- with another body: a binary built for 00050 calls it unchanged.
-- The event numbering has one plan whatever allocation_events' statistics
-- say (issue 44, bench first-burst's "ANALYZE first" case).
--
-- 00046's planner options left the numbering's UPDATE two plans: the
-- unnumbered events (allocation_events_unnumbered) joined to each event by
-- its key, or the whole of allocation_events_pkey read in order with the
-- unnumbered events rescanned for each row (a join filter). Both cost the
-- same while allocation_events was analyzed empty (a whole-database
-- ANALYZE before a first burst: one row estimated on either side), and a
-- session whose generic plan was made then kept the second as the table
-- grew: 188,434 buffers and 3.9 s per call by the end of a burst of 3,000
-- (12.4 s for one call), the stream's events, and the clients waiting for
-- them, that late (81-179 allocations/s against 2,100-2,800).
--
-- Now the UPDATE has no choice: each event is numbered by its key, one
-- statement per event (a point update: the same heap and index work as the
-- set-based one, a few microseconds more per event). The ids of the
-- unnumbered events are read first, by allocation_events_unnumbered or by
-- allocation_events_seq_key's "seq IS NULL" (the statistics choose; both
-- read the unnumbered events only), then sorted apart (asking the scan for
-- id order would make an ordered read of allocation_events_pkey a
-- candidate).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_sequence_allocation_events() RETURNS bigint
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS $$
DECLARE
    base bigint;
    ids bigint[];
    n int;
BEGIN
    SELECT m.last_seq INTO base FROM allocation_events_meta m FOR UPDATE;
    -- No order asked of the scan (an ordered read of
    -- allocation_events_pkey would then be a candidate): sorted apart.
    SELECT array_agg(e.id) INTO ids FROM allocation_events e WHERE e.seq IS NULL;
    n := coalesce(cardinality(ids), 0);
    IF n = 0 THEN
        RETURN 0;
    END IF;
    SELECT array_agg(u.id ORDER BY u.id) INTO ids FROM unnest(ids) AS u(id);
    -- The meta row's lock serializes numberings, and pruning removes
    -- numbered events only: every id read is still there, unnumbered.
    FOR i IN 1 .. n LOOP
        UPDATE allocation_events SET seq = base + i WHERE id = ids[i];
    END LOOP;
    UPDATE allocation_events_meta SET last_seq = base + n;
    PERFORM pg_notify('metalloc_allocation_events', '');
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_sequence_allocation_events() RETURNS bigint
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS $$
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
