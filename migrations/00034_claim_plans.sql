-- +goose Up
-- Kind: expand. Functions' planner options only.
-- The database backend's claim (metalloc_claim_reserve) and its one-row
-- path (metalloc_reserve) read and write allocations by key. A session
-- that planned them while allocations was analyzed empty (every
-- allocation deleted, autovacuum analyzed the table, then a conductor
-- started: its connections warm up and plan at once, 00032) kept
-- sequential scans of allocations for its claims until the next
-- autoanalyze: 333 µs per allocation for 3,000 claimed in batches of 8,
-- against 190 µs by index. Like the placement backend's claim (00033),
-- they read by index whatever the statistics; the setting holds for the
-- functions and triggers they call (metalloc_hold, the event and link
-- triggers) and for the foreign key checks their writes run.
ALTER FUNCTION metalloc_claim_reserve(bigint, integer)
    SET enable_seqscan = off;
ALTER FUNCTION metalloc_reserve(bigint, bigint, text, text[], uuid[], text, text)
    SET enable_seqscan = off;

-- +goose Down
ALTER FUNCTION metalloc_reserve(bigint, bigint, text, text[], uuid[], text, text)
    RESET enable_seqscan;
ALTER FUNCTION metalloc_claim_reserve(bigint, integer)
    RESET enable_seqscan;
