-- +goose Up
-- The topology for gang allocation (package topology): the operator's
-- levels, coarse to fine (position 0 is the coarsest), each read from a node
-- field the operator already keeps. One table so that every API and
-- conductor process sees the same topology; `metalloc-manage topology set`
-- and PUT /v1/topology replace the whole list in one transaction.
--
-- source is one of
--   extra.KEY        the node's extra->>KEY (numbers as their text)
--   properties.KEY   the node's properties->>KEY
--   trait:PREFIX     the suffix after PREFIX of the node's first trait (in
--                    byte order) that starts with PREFIX
--   aggregate        the smallest aggregate uuid of the node's Placement
--                    resource provider (the provider shares the node's uuid)
CREATE TABLE topology_levels (
    position   integer PRIMARY KEY CHECK (position >= 0),
    name       text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z][A-Za-z0-9_-]{0,62}$'),
    source     text NOT NULL CHECK (source ~ '^((extra|properties)\..+|trait:[^[:space:]]+|aggregate)$'),
    updated_at timestamptz
);

-- A node's path: one value per level, coarse to fine; '' where the node has
-- no value for a level (it is then in no domain of that level or finer).
-- p_traits are the node's traits (free_nodes.traits).
-- +goose StatementBegin
CREATE FUNCTION metalloc_node_path(p_uuid uuid, p_extra jsonb, p_properties jsonb, p_traits text[])
RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT ARRAY(
        SELECT COALESCE(CASE
                   WHEN l.source LIKE 'extra.%' THEN p_extra ->> substr(l.source, 7)
                   WHEN l.source LIKE 'properties.%' THEN p_properties ->> substr(l.source, 12)
                   WHEN l.source LIKE 'trait:%' THEN
                       (SELECT substr(t.trait, length(l.source) - 5)
                          FROM unnest(p_traits) t (trait)
                         WHERE starts_with(t.trait, substr(l.source, 7))
                         ORDER BY t.trait COLLATE "C"
                         LIMIT 1)
                   WHEN l.source = 'aggregate' THEN
                       (SELECT a.aggregate_uuid::text
                          FROM placement.resource_providers rp
                          JOIN placement.resource_provider_aggregates a ON a.resource_provider_id = rp.id
                         WHERE rp.uuid = p_uuid
                         ORDER BY a.aggregate_uuid
                         LIMIT 1)
               END, '')
          FROM topology_levels l
         ORDER BY l.position);
END;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION metalloc_node_path(uuid, jsonb, jsonb, text[]);
DROP TABLE topology_levels;
