-- Queries of metalloc-placement (schema "placement", migrations/00003).
-- Grouped by resource: providers, classes, traits, aggregates, inventories,
-- consumers and allocations, usages.

-- name: ProviderByUUID :one
SELECT * FROM placement.resource_providers WHERE uuid = @uuid;

-- providers, classes, traits, aggregates
-- (providers.go, classes.go, traits.go, aggregates.go)

-- name: ProviderGet :one
SELECT rp.id, rp.uuid, rp.name, rp.generation, rp.parent_provider_id, rp.root_provider_id,
       parent.uuid AS parent_provider_uuid, root.uuid AS root_provider_uuid,
       rp.created_at, rp.updated_at
  FROM placement.resource_providers rp
  LEFT JOIN placement.resource_providers parent ON parent.id = rp.parent_provider_id
  LEFT JOIN placement.resource_providers root ON root.id = rp.root_provider_id
 WHERE rp.uuid = @uuid;

-- name: ProviderBumpGeneration :execrows
UPDATE placement.resource_providers SET generation = generation + 1, updated_at = now()
 WHERE id = @id AND generation = @generation;

-- name: ProviderInsert :one
INSERT INTO placement.resource_providers (uuid, name, parent_provider_id, root_provider_id)
VALUES (@uuid, @name, sqlc.narg(parent_provider_id), sqlc.narg(root_provider_id))
ON CONFLICT DO NOTHING
RETURNING id;

-- name: ProviderSetOwnRoot :exec
UPDATE placement.resource_providers SET root_provider_id = id WHERE id = @id;

-- name: ProviderUpdate :execrows
UPDATE placement.resource_providers
   SET name = @name, parent_provider_id = sqlc.narg(parent_provider_id),
       root_provider_id = @root_provider_id, updated_at = now()
 WHERE id = @id;

-- name: ProviderNameTaken :one
SELECT EXISTS (SELECT 1 FROM placement.resource_providers WHERE name = @name AND id <> @id);

-- name: ProviderUUIDTaken :one
SELECT EXISTS (SELECT 1 FROM placement.resource_providers WHERE uuid = @uuid);

-- name: ProviderSubtreeIDs :many
WITH RECURSIVE sub(id) AS (
    SELECT @id::bigint
    UNION ALL
    SELECT c.id FROM placement.resource_providers c JOIN sub ON c.parent_provider_id = sub.id
)
SELECT id FROM sub;

-- name: ProviderSetRootFor :exec
UPDATE placement.resource_providers SET root_provider_id = @root_provider_id
 WHERE id = ANY(@ids::bigint[]);

-- name: ProviderHasAllocations :one
SELECT EXISTS (SELECT 1 FROM placement.allocations WHERE resource_provider_id = @id);

-- name: ProviderHasChildren :one
SELECT EXISTS (SELECT 1 FROM placement.resource_providers WHERE parent_provider_id = @id::bigint);

-- name: ProviderDelete :execrows
DELETE FROM placement.resource_providers WHERE id = @id;

-- name: ProviderLockForUpdate :one
SELECT generation FROM placement.resource_providers WHERE id = @id FOR UPDATE;

-- name: ResourceClassByName :one
SELECT id, name, created_at, updated_at FROM placement.resource_classes WHERE name = @name;

-- name: ResourceClassList :many
SELECT id, name, created_at, updated_at FROM placement.resource_classes ORDER BY id;

-- name: ResourceClassInsert :one
INSERT INTO placement.resource_classes (id, name)
VALUES (nextval('placement.custom_resource_class_id'), @name)
ON CONFLICT (name) DO NOTHING
RETURNING id, name, created_at, updated_at;

-- name: ResourceClassRename :one
UPDATE placement.resource_classes SET name = @name, updated_at = now()
 WHERE id = @id
RETURNING id, name, created_at, updated_at;

-- name: ResourceClassInUse :one
SELECT EXISTS (SELECT 1 FROM placement.inventories WHERE resource_class_id = @id);

-- name: ResourceClassDelete :execrows
DELETE FROM placement.resource_classes WHERE id = @id;

-- name: TraitsSync :exec
INSERT INTO placement.traits (name) SELECT unnest(@names::text[]) ON CONFLICT (name) DO NOTHING;

-- name: TraitByName :one
SELECT id, name, created_at, updated_at FROM placement.traits WHERE name = @name;

-- name: TraitInsert :execrows
INSERT INTO placement.traits (name) VALUES (@name) ON CONFLICT (name) DO NOTHING;

-- name: TraitList :many
SELECT t.name, t.created_at, t.updated_at FROM placement.traits t
 WHERE (sqlc.narg(names)::text[] IS NULL OR t.name = ANY(sqlc.narg(names)::text[]))
   AND (sqlc.narg(prefix)::text IS NULL OR starts_with(t.name, sqlc.narg(prefix)::text))
   AND (sqlc.narg(associated)::boolean IS NULL OR
        EXISTS (SELECT 1 FROM placement.resource_provider_traits rpt WHERE rpt.trait_id = t.id)
          = sqlc.narg(associated)::boolean)
 ORDER BY t.name;

-- name: TraitInUse :one
SELECT EXISTS (SELECT 1 FROM placement.resource_provider_traits WHERE trait_id = @id);

-- name: TraitDelete :execrows
DELETE FROM placement.traits WHERE id = @id;

-- name: TraitsByNames :many
SELECT id, name FROM placement.traits WHERE name = ANY(@names::text[]);

-- name: ProviderTraitNames :many
SELECT t.name FROM placement.resource_provider_traits rpt
  JOIN placement.traits t ON t.id = rpt.trait_id
 WHERE rpt.resource_provider_id = @id ORDER BY t.name;

-- name: ProviderTraitsClear :exec
DELETE FROM placement.resource_provider_traits WHERE resource_provider_id = @id;

-- name: ProviderTraitsAdd :exec
INSERT INTO placement.resource_provider_traits (resource_provider_id, trait_id)
SELECT @id::bigint, unnest(@trait_ids::bigint[]) ON CONFLICT DO NOTHING;

-- name: ProviderAggregateUUIDs :many
SELECT aggregate_uuid FROM placement.resource_provider_aggregates
 WHERE resource_provider_id = @id ORDER BY aggregate_uuid;

-- name: ProviderAggregatesClear :exec
DELETE FROM placement.resource_provider_aggregates WHERE resource_provider_id = @id;

-- name: ProviderAggregatesAdd :exec
INSERT INTO placement.resource_provider_aggregates (resource_provider_id, aggregate_uuid)
SELECT @id::bigint, unnest(@aggregate_uuids::uuid[]) ON CONFLICT DO NOTHING;

-- inventories, allocations, usages

-- name: InvResourceClassesByName :many
SELECT id, name FROM placement.resource_classes WHERE name = ANY(@names::text[]);

-- name: ProviderInventories :many
SELECT rc.name AS resource_class, i.*
  FROM placement.inventories i
  JOIN placement.resource_classes rc ON rc.id = i.resource_class_id
 WHERE i.resource_provider_id = @provider_id
 ORDER BY rc.name;

-- name: InsertInventory :exec
INSERT INTO placement.inventories
       (resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, step_size, allocation_ratio)
VALUES (@provider_id, @class_id, @total, @reserved, @min_unit, @max_unit, @step_size, @allocation_ratio);

-- name: UpdateInventory :execrows
UPDATE placement.inventories
   SET total = @total, reserved = @reserved, min_unit = @min_unit, max_unit = @max_unit,
       step_size = @step_size, allocation_ratio = @allocation_ratio, updated_at = now()
 WHERE resource_provider_id = @provider_id AND resource_class_id = @class_id;

-- name: DeleteInventories :execrows
DELETE FROM placement.inventories
 WHERE resource_provider_id = @provider_id AND resource_class_id = ANY(@class_ids::int[]);

-- name: ClassesInUse :many
-- In class id order (standard classes first), as Placement names them in
-- "Inventory for 'VCPU, DISK_GB' ... in use".
SELECT rc.name
  FROM placement.resource_classes rc
 WHERE rc.id = ANY(@class_ids::int[])
   AND EXISTS (SELECT 1 FROM placement.allocations a
                WHERE a.resource_provider_id = @provider_id AND a.resource_class_id = rc.id)
 ORDER BY rc.id;

-- name: OverCapacity :many
-- Inventories whose allocations use more than their capacity ((total -
-- reserved) * allocation_ratio), which Placement allows an inventory update
-- to leave behind; by provider uuid and class.
SELECT rp.uuid AS provider_uuid, rp.name AS provider_name, rc.name AS resource_class,
       u.used::bigint AS used, floor((i.total - i.reserved) * i.allocation_ratio)::bigint AS capacity
  FROM placement.inventories i
  JOIN (SELECT resource_provider_id, resource_class_id, sum(used) AS used
          FROM placement.allocations GROUP BY resource_provider_id, resource_class_id) u
    ON u.resource_provider_id = i.resource_provider_id AND u.resource_class_id = i.resource_class_id
  JOIN placement.resource_providers rp ON rp.id = i.resource_provider_id
  JOIN placement.resource_classes rc ON rc.id = i.resource_class_id
 WHERE u.used > floor((i.total - i.reserved) * i.allocation_ratio)
 ORDER BY rp.uuid, rc.name;

-- name: ProviderClassUsage :one
SELECT COALESCE(sum(used), 0)::bigint AS used
  FROM placement.allocations
 WHERE resource_provider_id = @provider_id AND resource_class_id = @class_id;

-- name: LockConsumer :one
SELECT * FROM placement.consumers WHERE uuid = @uuid FOR UPDATE;

-- name: InsertConsumer :one
-- A consumer is created by its first allocation write, which leaves it at
-- generation 1 (Placement creates it at 0 and increments it).
INSERT INTO placement.consumers (uuid, project_id, user_id, consumer_type, generation)
VALUES (@uuid, @project_id, @user_id, @consumer_type, 1)
ON CONFLICT (uuid) DO NOTHING
RETURNING *;

-- name: UpdateConsumer :exec
UPDATE placement.consumers
   SET project_id = @project_id, user_id = @user_id, consumer_type = @consumer_type,
       generation = generation + 1, updated_at = now()
 WHERE id = @id;

-- name: DeleteConsumer :exec
DELETE FROM placement.consumers WHERE id = @id;

-- name: ConsumerAllocationProviders :many
SELECT DISTINCT resource_provider_id FROM placement.allocations WHERE consumer_id = @consumer_id;

-- name: DeleteConsumerAllocations :exec
DELETE FROM placement.allocations WHERE consumer_id = ANY(@consumer_ids::bigint[]);

-- name: LockProviders :many
SELECT id, uuid, generation FROM placement.resource_providers
 WHERE id = ANY(@ids::bigint[]) ORDER BY id FOR UPDATE;

-- name: ClaimInventories :many
-- The inventories of the classes on the providers (by uuid: the pipelined
-- claim sends it with the lock, before it knows the providers' ids), with
-- their current usage. The providers are found first (OFFSET 0 keeps the
-- planner from scanning every inventory of a class when a bulk insert left
-- no statistics).
SELECT i.resource_provider_id, i.resource_class_id, rc.name AS resource_class,
       i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio,
       COALESCE((SELECT sum(a.used) FROM placement.allocations a
                  WHERE a.resource_provider_id = i.resource_provider_id
                    AND a.resource_class_id = i.resource_class_id), 0)::bigint AS used
  FROM (SELECT p.id FROM placement.resource_providers p WHERE p.uuid = ANY(@provider_uuids::uuid[]) OFFSET 0) p
  CROSS JOIN placement.resource_classes rc
  JOIN placement.inventories i ON i.resource_provider_id = p.id AND i.resource_class_id = rc.id
 WHERE rc.name = ANY(@class_names::text[]);

-- name: BumpProviderGenerations :exec
UPDATE placement.resource_providers SET generation = generation + 1, updated_at = now()
 WHERE id = ANY(@ids::bigint[]);

-- name: ConsumerAllocations :many
-- In the order the allocations were written, which is the order of the
-- request that wrote them (providers, then each one's classes): the order
-- Placement lists them in (its query has no ORDER BY and reads the rows
-- through the consumer index, in insertion order).
SELECT a.used, a.created_at, a.updated_at, rc.name AS resource_class,
       rp.uuid AS provider_uuid, rp.generation AS provider_generation,
       c.project_id, c.user_id, c.consumer_type, c.generation AS consumer_generation
  FROM placement.consumers c
  JOIN placement.allocations a ON a.consumer_id = c.id
  JOIN placement.resource_providers rp ON rp.id = a.resource_provider_id
  JOIN placement.resource_classes rc ON rc.id = a.resource_class_id
 WHERE c.uuid = @uuid
 ORDER BY a.id;

-- name: ProviderAllocations :many
SELECT a.used, a.created_at, a.updated_at, rc.name AS resource_class,
       c.uuid AS consumer_uuid, c.generation AS consumer_generation
  FROM placement.allocations a
  JOIN placement.consumers c ON c.id = a.consumer_id
  JOIN placement.resource_classes rc ON rc.id = a.resource_class_id
 WHERE a.resource_provider_id = @provider_id
 ORDER BY c.uuid, rc.name;

-- name: ProviderUsages :many
SELECT rc.name AS resource_class,
       COALESCE((SELECT sum(a.used) FROM placement.allocations a
                  WHERE a.resource_provider_id = i.resource_provider_id
                    AND a.resource_class_id = i.resource_class_id), 0)::bigint AS usage
  FROM placement.inventories i
  JOIN placement.resource_classes rc ON rc.id = i.resource_class_id
 WHERE i.resource_provider_id = @provider_id
 ORDER BY rc.name;

-- name: ProjectUsages :many
SELECT rc.name AS resource_class, sum(a.used)::bigint AS usage
  FROM placement.allocations a
  JOIN placement.consumers c ON c.id = a.consumer_id
  JOIN placement.resource_classes rc ON rc.id = a.resource_class_id
 WHERE c.project_id = @project_id
   AND (sqlc.narg('user_id')::text IS NULL OR c.user_id = sqlc.narg('user_id'))
 GROUP BY rc.name
 ORDER BY rc.name;

-- name: ProjectUsagesByType :many
SELECT c.consumer_type, rc.name AS resource_class, sum(a.used)::bigint AS usage
  FROM placement.allocations a
  JOIN placement.consumers c ON c.id = a.consumer_id
  JOIN placement.resource_classes rc ON rc.id = a.resource_class_id
 WHERE c.project_id = @project_id
   AND (sqlc.narg('user_id')::text IS NULL OR c.user_id = sqlc.narg('user_id'))
 GROUP BY c.consumer_type, rc.name
 ORDER BY c.consumer_type, rc.name;

-- name: ProjectConsumerCounts :many
SELECT c.consumer_type, count(DISTINCT c.id)::bigint AS consumers
  FROM placement.consumers c
 WHERE c.project_id = @project_id
   AND (sqlc.narg('user_id')::text IS NULL OR c.user_id = sqlc.narg('user_id'))
   AND EXISTS (SELECT 1 FROM placement.allocations a WHERE a.consumer_id = c.id)
 GROUP BY c.consumer_type;

-- name: LockClaimProviders :many
-- Locks, in id order, the providers named by uuid and those the consumers
-- currently allocate from.
SELECT id, uuid, generation FROM placement.resource_providers
 WHERE id = ANY(ARRAY(
        SELECT p.id FROM placement.resource_providers p WHERE p.uuid = ANY(@uuids::uuid[])
        UNION
        SELECT a.resource_provider_id FROM placement.allocations a
         WHERE a.consumer_id = ANY(@consumer_ids::bigint[])))
 ORDER BY id FOR UPDATE;

-- name: LockProvidersByUUID :many
-- Locks, in id order, the providers named by uuid: LockClaimProviders
-- for claims of new consumers (the pipelined claim and the local batch),
-- which have no current allocations. A plain probe of the uuid index: the
-- id = ANY(ARRAY(subquery)) form gets a sequential scan of every provider
-- (its array is costed at 10 elements).
SELECT id, uuid, generation FROM placement.resource_providers
 WHERE uuid = ANY(@uuids::uuid[])
 ORDER BY id FOR UPDATE;

-- The claim of new consumers on a single provider (the common case) runs
-- the three statements below instead of LockProvidersByUUID,
-- ClaimInventories and InsertAllocationsBump. They take the provider as a
-- scalar, so that PostgreSQL keeps one generic plan per connection (unique
-- index probes) instead of planning each execution again: with an array
-- parameter the generic plan is costed for 10 elements and loses to a
-- custom one, re-planned at every call (pg_stat_statements, 1,000
-- providers: ~0.2 ms of planning per claim, more than their execution).

-- name: LockProviderByUUID :many
SELECT id, uuid, generation FROM placement.resource_providers
 WHERE uuid = @uuid FOR UPDATE;

-- name: ClaimInventoriesOne :many
-- ClaimInventories for one provider.
SELECT i.resource_provider_id, i.resource_class_id, rc.name AS resource_class,
       i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio,
       COALESCE((SELECT sum(a.used) FROM placement.allocations a
                  WHERE a.resource_provider_id = i.resource_provider_id
                    AND a.resource_class_id = i.resource_class_id), 0)::bigint AS used
  FROM placement.resource_providers p
  JOIN placement.inventories i ON i.resource_provider_id = p.id
  JOIN placement.resource_classes rc ON rc.id = i.resource_class_id
 WHERE p.uuid = @provider_uuid AND rc.name = ANY(@class_names::text[]);

-- name: InsertAllocationsBumpOne :exec
-- InsertAllocationsBump when the generation bumped is one provider's.
WITH ins AS (
    INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
    SELECT unnest(@provider_ids::bigint[]), unnest(@consumer_ids::bigint[]),
           unnest(@class_ids::int[]), unnest(@used::bigint[])
)
UPDATE placement.resource_providers SET generation = generation + 1, updated_at = now()
 WHERE id = @bump_id::bigint;

-- name: InsertAllocationsBump :exec
WITH ins AS (
    INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
    SELECT unnest(@provider_ids::bigint[]), unnest(@consumer_ids::bigint[]),
           unnest(@class_ids::int[]), unnest(@used::bigint[])
)
UPDATE placement.resource_providers SET generation = generation + 1, updated_at = now()
 WHERE id = ANY(@bump_ids::bigint[]);


-- name: MirrorExisting :many
-- The resource tracker's in-process mirror (mirror.go: MirrorTx), for a
-- conductor on this database, reads and writes the flat providers of many
-- nodes in a few statements instead of five API requests each. This one:
-- which of these providers exist (no lock).
SELECT id, uuid FROM placement.resource_providers WHERE uuid = ANY(@uuids::uuid[]);

-- name: MirrorLock :many
-- The existing providers of MirrorExisting, locked in id order; one
-- another writer holds is skipped (the tracker retries it on its next
-- pass): the mirror never waits for a provider, so it closes no lock cycle.
SELECT id, uuid, name FROM placement.resource_providers
 WHERE id = ANY(@ids::bigint[])
 ORDER BY id
   FOR UPDATE SKIP LOCKED;

-- name: MirrorInventories :many
-- The inventories of locked providers with their usage.
SELECT i.resource_provider_id, rc.name AS resource_class,
       i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio,
       COALESCE((SELECT sum(a.used) FROM placement.allocations a
                  WHERE a.resource_provider_id = i.resource_provider_id
                    AND a.resource_class_id = i.resource_class_id), 0)::bigint AS used
  FROM placement.inventories i
  JOIN placement.resource_classes rc ON rc.id = i.resource_class_id
 WHERE i.resource_provider_id = ANY(@ids::bigint[]);

-- name: MirrorTraits :many
SELECT pt.resource_provider_id, t.name
  FROM placement.resource_provider_traits pt
  JOIN placement.traits t ON t.id = pt.trait_id
 WHERE pt.resource_provider_id = ANY(@ids::bigint[]);

-- name: MirrorNamesTaken :many
-- Which of these names another provider than the given one has.
SELECT x.id::bigint AS id, x.name::text AS name
  FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@names::text[]) AS name) x
 WHERE EXISTS (SELECT 1 FROM placement.resource_providers p WHERE p.name = x.name AND p.id <> x.id);

-- name: MirrorCreate :many
-- New root providers (each its own root) at generation @generations[i]
-- (0 as created, 1 when their inventories and traits are written with
-- them: the API's create then PUTs bump it once per mirror); one whose
-- uuid or name is taken is left out (no row comes back for it).
INSERT INTO placement.resource_providers (id, uuid, name, root_provider_id, generation)
OVERRIDING SYSTEM VALUE
SELECT x.id, x.uuid, x.name, x.id, x.generation
  FROM (SELECT nextval('placement.resource_providers_id_seq') AS id, u.uuid, u.name, u.generation
          FROM (SELECT unnest(@uuids::uuid[]) AS uuid, unnest(@names::text[]) AS name,
                       unnest(@generations::int[]) AS generation) u) x
ON CONFLICT DO NOTHING
RETURNING id, uuid;

-- name: MirrorRename :exec
UPDATE placement.resource_providers p SET name = x.name, updated_at = now()
  FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@names::text[]) AS name) x
 WHERE p.id = x.id;

-- name: MirrorEnsureClasses :exec
-- Custom resource classes, created when missing (PUT /resource_classes/{name}).
INSERT INTO placement.resource_classes (id, name)
SELECT nextval('placement.custom_resource_class_id'), n
  FROM unnest(@names::text[]) n
 WHERE NOT EXISTS (SELECT 1 FROM placement.resource_classes rc WHERE rc.name = n)
ON CONFLICT (name) DO NOTHING;

-- name: MirrorEnsureTraits :exec
-- Custom traits, created when missing (PUT /traits/{name}).
INSERT INTO placement.traits (name) SELECT unnest(@names::text[]) ON CONFLICT (name) DO NOTHING;

-- name: MirrorKnownTraits :many
SELECT name FROM placement.traits WHERE name = ANY(@names::text[]);

-- name: MirrorDeleteInventories :exec
DELETE FROM placement.inventories i
 USING (SELECT unnest(@ids::bigint[]) AS id, unnest(@classes::text[]) AS class) x, placement.resource_classes rc
 WHERE rc.name = x.class AND i.resource_provider_id = x.id AND i.resource_class_id = rc.id;

-- name: MirrorSetInventories :exec
INSERT INTO placement.inventories
       (resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, step_size, allocation_ratio)
SELECT x.id, rc.id, x.total, x.reserved, x.min_unit, x.max_unit, x.step_size, x.ratio
  FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@classes::text[]) AS class,
               unnest(@totals::int[]) AS total, unnest(@reserveds::int[]) AS reserved,
               unnest(@min_units::int[]) AS min_unit, unnest(@max_units::int[]) AS max_unit,
               unnest(@step_sizes::int[]) AS step_size, unnest(@ratios::float8[]) AS ratio) x
  JOIN placement.resource_classes rc ON rc.name = x.class
ON CONFLICT (resource_provider_id, resource_class_id) DO UPDATE
   SET total = EXCLUDED.total, reserved = EXCLUDED.reserved, min_unit = EXCLUDED.min_unit,
       max_unit = EXCLUDED.max_unit, step_size = EXCLUDED.step_size,
       allocation_ratio = EXCLUDED.allocation_ratio, updated_at = now();

-- name: MirrorDeleteTraits :exec
DELETE FROM placement.resource_provider_traits pt
 USING (SELECT unnest(@ids::bigint[]) AS id, unnest(@names::text[]) AS name) x, placement.traits t
 WHERE t.name = x.name AND pt.resource_provider_id = x.id AND pt.trait_id = t.id;

-- name: MirrorAddTraits :exec
INSERT INTO placement.resource_provider_traits (resource_provider_id, trait_id)
SELECT x.id, t.id
  FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@names::text[]) AS name) x
  JOIN placement.traits t ON t.name = x.name
ON CONFLICT DO NOTHING;

-- name: MirrorBump :exec
UPDATE placement.resource_providers SET generation = generation + 1, updated_at = now()
 WHERE id = ANY(@ids::bigint[]);
