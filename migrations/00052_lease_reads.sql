-- +goose Up
-- Kind: expand. A new index and a new function; nothing existing changes.
-- The lease reads (lease/query.sql: admission's FreeNodes, availability's
-- MatchingNodes) at 10,000 nodes and 5,000 leases (issue 43's benchmark,
-- `metalloc-manage bench leases`).
--
-- The blocking rows over a window: the exclusion constraint's GiST index
-- leads with node_id, and a search on the window alone read all of it
-- (about 40 ms for 40,000 rows, as long as reading the table); this one
-- reads the rows that overlap the window (a day: 2,000 rows in 3 ms).
CREATE INDEX lease_nodes_during_idx ON lease_nodes USING gist (during) WHERE NOT released;

-- The topology paths of many nodes at once. The view
-- node_topology_paths computes a node's path in a subquery per node (an
-- unnest of the levels, a sort by position, a CASE per level): at 10,000
-- nodes that is most of the time of an availability search. This function
-- returns the same paths (one value per level, coarse to fine, '' where
-- the node has none) for the nodes p_ids in one statement built for the
-- levels there are: an extra.KEY or properties.KEY level is an expression
-- on the node's row, so the statement is one scan of nodes; a trait: or
-- aggregate level is the view's lookup per node. The statement is planned
-- at each call (EXECUTE), for its ids; none (NULL or empty) return at once.
-- +goose StatementBegin
CREATE FUNCTION metalloc_topology_paths(p_ids bigint[])
RETURNS TABLE (node_id bigint, path text[])
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    v_values text[] := '{}';
    v_source text;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN;
    END IF;
    FOR v_source IN SELECT l.source FROM topology_levels l ORDER BY l.position LOOP
        v_values := v_values || format('COALESCE(%s, %L)', CASE
            WHEN v_source LIKE 'extra.%' THEN format('n.extra ->> %L', substr(v_source, 7))
            WHEN v_source LIKE 'properties.%' THEN format('n.properties ->> %L', substr(v_source, 12))
            WHEN v_source LIKE 'trait:%' THEN format(
                '(SELECT substr(t.trait, %s) FROM node_traits t'
                ' WHERE t.node_id = n.id AND starts_with(t.trait, %L)'
                ' ORDER BY t.trait COLLATE "C" LIMIT 1)', length(v_source) - 5, substr(v_source, 7))
            WHEN v_source = 'aggregate' THEN
                '(SELECT a.aggregate_uuid::text FROM placement.resource_providers rp'
                ' JOIN placement.resource_provider_aggregates a ON a.resource_provider_id = rp.id'
                ' WHERE rp.uuid = n.uuid ORDER BY a.aggregate_uuid LIMIT 1)'
            ELSE 'NULL::text'
        END, '');
    END LOOP;
    RETURN QUERY EXECUTE format('SELECT n.id, ARRAY[%s]::text[] FROM nodes n WHERE n.id = ANY ($1)',
                                array_to_string(v_values, ', '))
        USING p_ids;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION metalloc_topology_paths(bigint[]);
DROP INDEX lease_nodes_during_idx;
