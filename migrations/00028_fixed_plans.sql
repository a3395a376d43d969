-- +goose Up
-- Kind: expand. A function's planner options and a new function.
-- Plans that do not depend on the statistics (issue 29).
--
-- metalloc_pick's walk with a Placement class (the placement backend's
-- one-statement claim) joins each free node to its provider by uuid and to
-- the provider's inventory of the class. Planned while Placement's tables
-- were small or unanalyzed (a fleet enrolled a moment ago, its providers
-- mirrored meanwhile), the generic plan a session keeps put every
-- inventory of the class on the inner side of the join, filtered by uuid
-- for each node: 258 inventories and 1,500 buffers per pick at 2,000 nodes
-- (auto_explain), where a probe of the provider's uuid reads about ten.
-- The walk's plan is fixed: the joins in the order written (the node in
-- id order from nodes_free_idx, its provider by uuid, its inventory by
-- key), nested loops over index scans only.
ALTER FUNCTION metalloc_pick(text, text[], uuid[], text, text, integer, bigint)
    SET join_collapse_limit = 1
    SET enable_seqscan = off
    SET enable_hashjoin = off
    SET enable_mergejoin = off
    SET enable_material = off;

-- The queue's size for metrics (AllocatingStats) counts the rows of the
-- partial index allocations_allocating_idx; with statistics taken while
-- most rows were allocating (a burst), the planner read the whole table
-- instead (691 against 56 buffers with 43,000 finished rows). As a
-- function with its own settings it keeps the index.
-- +goose StatementBegin
CREATE FUNCTION metalloc_allocating_stats(OUT allocating bigint, OUT oldest_seconds float8)
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT count(*)::bigint,
           coalesce(extract(epoch FROM now() - min(a.created_at)), 0)::float8
      FROM allocations a
     WHERE a.state = 'allocating'
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION metalloc_allocating_stats();
ALTER FUNCTION metalloc_pick(text, text[], uuid[], text, text, integer, bigint)
    RESET join_collapse_limit
    RESET enable_seqscan
    RESET enable_hashjoin
    RESET enable_mergejoin
    RESET enable_material;
