-- +goose Up
-- Kind: expand. It sets planner options on two functions (same names,
-- bodies, arguments and results), so a binary built for 00044 works on it
-- unchanged.
-- Plans of a new fleet's first burst that hold whatever the statistics of
-- allocations and allocation_events say (issue 44, bench first-burst).
--
-- The link check's plans hold whatever the allocations table's statistics
-- say (issue 44). allocation_node_link_check runs twice per reservation
-- (the allocation's and the node's deferred check) and reads each side by
-- its primary key. A session keeps the generic plans it made at its first
-- reservation; made while allocations was empty when last analyzed (a new
-- fleet's first burst), they were sequential scans of allocations, which
-- the burst itself then grows: 14 buffers per check at the end of a burst
-- of 3,000 against 3 by the key (pg_stat_statements, bench first-burst
-- --statements, 10,000 nodes), growing with every allocation inserted
-- until autovacuum analyzed the table. With sequential scans off, a
-- lookup by primary key has one plan, the key's, on an empty table as on
-- a large one.
ALTER FUNCTION allocation_node_link_check() SET enable_seqscan = off;

-- The API's event numbering (metalloc_sequence_allocation_events, every
-- few milliseconds under load) finds the unnumbered events through
-- allocation_events_unnumbered and numbers each by its key. Planned while
-- allocation_events was empty when last analyzed (a whole-database
-- ANALYZE before a first burst), its kept plan read the whole table per
-- call instead, 7,632 buffers at 77 ms per call by the end of a burst of
-- 3,000 (against 241 buffers, 1.3 ms, when planned on statistics of a few
-- thousand events), and the events, hence the clients following the
-- stream, came up to 28 s late (100 allocations/s against 1,500). With
-- sequential and bitmap scans, sorts, hash and merge joins off it has one
-- plan: the unnumbered events in id order from allocation_events_unnumbered,
-- then each by allocation_events_pkey.
ALTER FUNCTION metalloc_sequence_allocation_events()
    SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
    SET enable_hashjoin = off SET enable_mergejoin = off;

-- +goose Down
ALTER FUNCTION allocation_node_link_check() RESET enable_seqscan;
ALTER FUNCTION metalloc_sequence_allocation_events() RESET ALL;
