-- +goose Up
-- Kind: expand. A new function; nothing existing changes (binaries built
-- for 00052 keep calling metalloc_topology_paths).
-- The topology paths of the lease reads (lease/query.sql: FreeNodes,
-- MatchingNodes, CalendarNodes) computed in the reading statement itself,
-- as an expression on the node's row: at 7,500 nodes the paths through
-- metalloc_topology_paths (a plpgsql function returning a tuplestore)
-- cost 50-85 ms, the same paths inline about a third of it (issue 43,
-- docs/benchmarks.md).
--
-- metalloc_topology_path(p_sources, extra, properties) is the node's path
-- down to the levels p_sources (topology_levels.source, coarse to fine,
-- at most 8: topology.MaxLevels), one value per level, '' where the node
-- has none, as node_topology_paths gives it: for an extra.KEY or
-- properties.KEY source the value of KEY; a trait: or aggregate source is
-- a lookup in other tables, NULL here (the reads take those nodes' paths
-- from metalloc_topology_paths). A plain SQL expression without
-- subqueries, so that PostgreSQL inlines it into the statement (no
-- function call per node); one CASE per possible level.
-- +goose StatementBegin
CREATE FUNCTION metalloc_topology_path(p_sources text[], p_extra jsonb, p_properties jsonb)
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT (ARRAY[
    CASE WHEN starts_with(p_sources[1], 'extra.') THEN COALESCE(p_extra ->> substr(p_sources[1], 7), '')
         WHEN starts_with(p_sources[1], 'properties.') THEN COALESCE(p_properties ->> substr(p_sources[1], 12), '') END,
    CASE WHEN starts_with(p_sources[2], 'extra.') THEN COALESCE(p_extra ->> substr(p_sources[2], 7), '')
         WHEN starts_with(p_sources[2], 'properties.') THEN COALESCE(p_properties ->> substr(p_sources[2], 12), '') END,
    CASE WHEN starts_with(p_sources[3], 'extra.') THEN COALESCE(p_extra ->> substr(p_sources[3], 7), '')
         WHEN starts_with(p_sources[3], 'properties.') THEN COALESCE(p_properties ->> substr(p_sources[3], 12), '') END,
    CASE WHEN starts_with(p_sources[4], 'extra.') THEN COALESCE(p_extra ->> substr(p_sources[4], 7), '')
         WHEN starts_with(p_sources[4], 'properties.') THEN COALESCE(p_properties ->> substr(p_sources[4], 12), '') END,
    CASE WHEN starts_with(p_sources[5], 'extra.') THEN COALESCE(p_extra ->> substr(p_sources[5], 7), '')
         WHEN starts_with(p_sources[5], 'properties.') THEN COALESCE(p_properties ->> substr(p_sources[5], 12), '') END,
    CASE WHEN starts_with(p_sources[6], 'extra.') THEN COALESCE(p_extra ->> substr(p_sources[6], 7), '')
         WHEN starts_with(p_sources[6], 'properties.') THEN COALESCE(p_properties ->> substr(p_sources[6], 12), '') END,
    CASE WHEN starts_with(p_sources[7], 'extra.') THEN COALESCE(p_extra ->> substr(p_sources[7], 7), '')
         WHEN starts_with(p_sources[7], 'properties.') THEN COALESCE(p_properties ->> substr(p_sources[7], 12), '') END,
    CASE WHEN starts_with(p_sources[8], 'extra.') THEN COALESCE(p_extra ->> substr(p_sources[8], 7), '')
         WHEN starts_with(p_sources[8], 'properties.') THEN COALESCE(p_properties ->> substr(p_sources[8], 12), '') END
])[1:cardinality(p_sources)]
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION metalloc_topology_path(text[], jsonb, jsonb);
