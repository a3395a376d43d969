-- +goose Up
-- Kind: expand. A new table and view.
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

-- Every node's path: one value per level, coarse to fine; '' where the node
-- has no value for a level (it is then in no domain of that level or
-- finer). A view, so that a query reading the paths of some nodes (join on
-- id) computes only theirs: the levels are read once per query, then each
-- node's values come from its own row (extra, properties), its traits or
-- its provider's aggregates.
CREATE VIEW node_topology_paths AS
SELECT n.id,
       ARRAY(SELECT COALESCE(CASE
                   WHEN s.source LIKE 'extra.%' THEN n.extra ->> substr(s.source, 7)
                   WHEN s.source LIKE 'properties.%' THEN n.properties ->> substr(s.source, 12)
                   WHEN s.source LIKE 'trait:%' THEN
                       (SELECT substr(t.trait, length(s.source) - 5)
                          FROM node_traits t
                         WHERE t.node_id = n.id AND starts_with(t.trait, substr(s.source, 7))
                         ORDER BY t.trait COLLATE "C"
                         LIMIT 1)
                   WHEN s.source = 'aggregate' THEN
                       (SELECT a.aggregate_uuid::text
                          FROM placement.resource_providers rp
                          JOIN placement.resource_provider_aggregates a ON a.resource_provider_id = rp.id
                         WHERE rp.uuid = n.uuid
                         ORDER BY a.aggregate_uuid
                         LIMIT 1)
               END, '')
          FROM unnest(lv.sources) WITH ORDINALITY s (source, ord)
         ORDER BY s.ord) AS path
  FROM nodes n,
       (SELECT COALESCE(array_agg(l.source ORDER BY l.position), '{}') AS sources
          FROM topology_levels l) lv;

-- +goose Down
DROP VIEW node_topology_paths;
DROP TABLE topology_levels;
