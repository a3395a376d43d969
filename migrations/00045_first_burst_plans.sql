-- +goose Up
-- Kind: expand. It sets a planner option on one trigger function (same
-- name, body, arguments and results), so a binary built for 00044 works
-- on it unchanged.
-- Plans of a new fleet's first burst that hold whatever the statistics of
-- allocations say (issue 44, bench first-burst).
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

-- +goose Down
ALTER FUNCTION allocation_node_link_check() RESET enable_seqscan;
