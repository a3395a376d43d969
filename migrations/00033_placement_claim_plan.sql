-- +goose Up
-- Kind: expand. A function's planner options only.
-- The placement backend's claim (metalloc_claim_reserve_placement) checks,
-- under the provider's lock, that the provider can still give the unit:
-- the sum of the class's allocations on that provider. With the
-- statistics of an empty placement.allocations (analyzed before the first
-- claims, or after every allocation was deleted), the generic plan a
-- session keeps for that sum read the whole table (a sequential scan)
-- instead of the provider's entries in allocations_provider_class_idx, so
-- each claim cost more as allocations accumulated: 265 µs per allocation
-- for the claim's writes to Placement with 3,000 allocations, 83 µs with
-- the index (issue 29: the placement backend at 80 % of the database
-- backend). Like metalloc_pick's walk (00028), the function reads by
-- index only, whatever the statistics.
ALTER FUNCTION metalloc_claim_reserve_placement(bigint, integer, text, text)
    SET enable_seqscan = off;

-- +goose Down
ALTER FUNCTION metalloc_claim_reserve_placement(bigint, integer, text, text)
    RESET enable_seqscan;
