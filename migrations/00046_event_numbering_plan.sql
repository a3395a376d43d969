-- +goose Up
-- Kind: expand. It sets planner options on one function (same name, body,
-- arguments and results), so a binary built for 00045 works on it
-- unchanged.
-- The event numbering's plan holds whatever allocation_events' statistics
-- say (issue 44, bench first-burst's "ANALYZE first" case).
--
-- The API's event numbering (metalloc_sequence_allocation_events, every
-- few milliseconds under load) finds the unnumbered events through
-- allocation_events_unnumbered and numbers each by its key. Planned while
-- allocation_events was empty when last analyzed (a whole-database
-- ANALYZE before a first burst), its kept plan read the whole table per
-- call instead: 7,632 buffers at 77 ms per call by the end of a burst of
-- 3,000 (against 241 buffers, 1.3 ms, when planned on statistics of a few
-- thousand events), and the events, hence the clients following the
-- stream and the API's own numbering lock, came up to 28 s late (100
-- allocations/s against 1,500). With sequential and bitmap scans, sorts,
-- hash and merge joins off it has one plan: the unnumbered events in id
-- order from allocation_events_unnumbered, then each by
-- allocation_events_pkey.
--
-- jit = off: allocation_events_meta (one row) has no index, so its read
-- keeps the sequential scan at the disabled-path penalty cost, far above
-- jit_above_cost; with JIT on, every call compiled its statements, about
-- 100 ms a call (TestHubIdleWithoutStreams saw a pass numbering events
-- created 130 ms after it began), as 00005 and 00019 found for the pick.
ALTER FUNCTION metalloc_sequence_allocation_events()
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off;

-- +goose Down
ALTER FUNCTION metalloc_sequence_allocation_events() RESET ALL;
