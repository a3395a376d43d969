-- Queries of metalloc-placement (schema "placement", migrations/00003).
-- Grouped by resource: providers, classes, traits, aggregates, inventories,
-- consumers and allocations, usages.

-- name: ProviderByUUID :one
SELECT * FROM placement.resource_providers WHERE uuid = @uuid;

-- name: ResourceClassNames :many
SELECT id, name FROM placement.resource_classes ORDER BY id;
