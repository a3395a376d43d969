-- The allocation candidates search (load.go, find.go) loads the provider trees in
-- play with these few queries and combines them in Go.

-- name: ResourceClassNames :many
SELECT id, name FROM placement.resource_classes ORDER BY id;

-- name: TraitsByNames :many
SELECT id, name FROM placement.traits WHERE name = ANY(@names::text[]);

-- name: CandTreeRoot :one
-- The root of the tree of provider @uuid (in_tree).
SELECT root_provider_id FROM placement.resource_providers WHERE uuid = @uuid;

-- name: CandContext :one
-- Whether any provider has a parent (nested trees in use) and whether any
-- provider shares its inventory (trait MISC_SHARES_VIA_AGGREGATE). Both
-- are shaped so that only an index probe is cheap for the planner: min()
-- reads the first non-NULL entry of resource_providers_parent_idx, and the
-- semi join probes resource_provider_traits_trait_idx for the one trait
-- (as a plain EXISTS over the join, PostgreSQL expected a match within the
-- first rows of a sequential scan of resource_provider_traits and read
-- all of it when the sharing providers' rows came last: 18 ms at 100,000
-- providers, most of a limited request).
SELECT ((SELECT min(parent_provider_id) FROM placement.resource_providers) IS NOT NULL)::boolean AS has_trees,
       EXISTS (SELECT 1 FROM placement.traits t
                WHERE t.name = 'MISC_SHARES_VIA_AGGREGATE'
                  AND EXISTS (SELECT 1 FROM placement.resource_provider_traits rpt WHERE rpt.trait_id = t.id))::boolean AS has_sharing;

-- name: CandProvidersIn :many
SELECT rp.id, rp.uuid, rp.parent_provider_id, CASE WHEN rp.root_provider_id <> rp.id THEN rp.root_provider_id END AS root_provider_id
  FROM placement.resource_providers rp
 WHERE rp.root_provider_id = ANY(@roots::bigint[]);

-- name: CandTraitsIn :many
SELECT rpt.resource_provider_id, rpt.trait_id
  FROM placement.resource_provider_traits rpt
  JOIN placement.resource_providers rp ON rp.id = rpt.resource_provider_id
 WHERE rp.root_provider_id = ANY(@roots::bigint[]);

-- name: CandAggregatesIn :many
SELECT rpa.resource_provider_id, rpa.aggregate_uuid
  FROM placement.resource_provider_aggregates rpa
  JOIN placement.resource_providers rp ON rp.id = rpa.resource_provider_id
 WHERE rp.root_provider_id = ANY(@roots::bigint[]);

-- name: CandTraitNames :many
SELECT id, name FROM placement.traits WHERE id = ANY(@ids::bigint[]);

-- name: CandInventoriesIn :many
SELECT i.resource_provider_id, i.resource_class_id, i.total, CASE WHEN i.reserved <> 0 THEN i.reserved END AS reserved,
       CASE WHEN i.min_unit <> 1 THEN i.min_unit END AS min_unit, CASE WHEN i.max_unit <> i.total THEN i.max_unit END AS max_unit,
       CASE WHEN i.step_size <> 1 THEN i.step_size END AS step_size, CASE WHEN i.allocation_ratio <> 1 THEN i.allocation_ratio END AS allocation_ratio
  FROM placement.inventories i
  JOIN placement.resource_providers rp ON rp.id = i.resource_provider_id
 WHERE rp.root_provider_id = ANY(@roots::bigint[]);

-- name: CandWorldVersion :one
-- The version of the static rows (placement.world_version, migration 9)
-- and, when it differs from @known_version, whether there are at most
-- @max_providers providers (NULL otherwise).
SELECT wv.v, CASE WHEN wv.v <> @known_version::bigint
       THEN NOT EXISTS (SELECT 1 FROM placement.resource_providers OFFSET @max_providers::bigint) END AS small
  FROM placement.world_version wv;

-- The Cand*Changed queries read every row, but answer none unless the
-- version differs from @known_version (the rows cached by the process)
-- and the whole world is wanted (@whole) or small: one batch then reads
-- the version, these and the usage in one snapshot. Columns at their usual
-- values are NULL (reserved 0, min_unit 1, max_unit total, step_size 1,
-- allocation_ratio 1; root_provider_id when it is the provider itself):
-- sending a value is most of the cost of these scans.

-- name: CandProvidersChanged :many
SELECT rp.id, rp.uuid, rp.parent_provider_id, CASE WHEN rp.root_provider_id <> rp.id THEN rp.root_provider_id END AS root_provider_id
  FROM placement.resource_providers rp WHERE EXISTS (SELECT 1 FROM placement.world_version wv WHERE wv.v <> @known_version::bigint)
   AND (@whole::boolean OR NOT EXISTS (SELECT 1 FROM placement.resource_providers OFFSET @max_providers::bigint));

-- name: CandTraitsChanged :many
SELECT resource_provider_id, trait_id FROM placement.resource_provider_traits WHERE EXISTS (SELECT 1 FROM placement.world_version wv WHERE wv.v <> @known_version::bigint)
   AND (@whole::boolean OR NOT EXISTS (SELECT 1 FROM placement.resource_providers OFFSET @max_providers::bigint));

-- name: CandAggregatesChanged :many
SELECT resource_provider_id, aggregate_uuid FROM placement.resource_provider_aggregates WHERE EXISTS (SELECT 1 FROM placement.world_version wv WHERE wv.v <> @known_version::bigint)
   AND (@whole::boolean OR NOT EXISTS (SELECT 1 FROM placement.resource_providers OFFSET @max_providers::bigint));

-- name: CandInventoriesChanged :many
SELECT i.resource_provider_id, i.resource_class_id, i.total, CASE WHEN i.reserved <> 0 THEN i.reserved END AS reserved,
       CASE WHEN i.min_unit <> 1 THEN i.min_unit END AS min_unit, CASE WHEN i.max_unit <> i.total THEN i.max_unit END AS max_unit,
       CASE WHEN i.step_size <> 1 THEN i.step_size END AS step_size, CASE WHEN i.allocation_ratio <> 1 THEN i.allocation_ratio END AS allocation_ratio
  FROM placement.inventories i WHERE EXISTS (SELECT 1 FROM placement.world_version wv WHERE wv.v <> @known_version::bigint)
   AND (@whole::boolean OR NOT EXISTS (SELECT 1 FROM placement.resource_providers OFFSET @max_providers::bigint));

-- name: CandUsageAll :many
-- Every allocation row, not the sum per provider and class: usageInto
-- adds them up. sum() of a bigint is a numeric in PostgreSQL: grouping
-- 5,000 rows that way (10,000 bare-metal providers, half of them
-- allocated) took 2-13 ms of execution per request, against 0.5 ms to
-- scan and send them (EXPLAIN ANALYZE on a loaded 2-core machine).
SELECT a.resource_provider_id, a.resource_class_id, a.used
  FROM placement.allocations a;

-- name: CandUsageIn :many
-- Every allocation row of the trees of @roots (see CandUsageAll).
SELECT a.resource_provider_id, a.resource_class_id, a.used
  FROM placement.allocations a
  JOIN placement.resource_providers arp ON arp.id = a.resource_provider_id
 WHERE arp.root_provider_id = ANY(@roots::bigint[]);

-- name: CandSharingRootsFor :many
-- Roots of the sharing providers (trait @sharing_trait) in an aggregate
-- with any provider of the trees of @roots: the aggregates first, each
-- once, then their members (probing every member of every aggregate of
-- every provider costs ten times more at 100,000 providers).
SELECT DISTINCT sp.root_provider_id
  FROM placement.resource_provider_aggregates sa
  JOIN placement.resource_provider_traits rpt ON rpt.resource_provider_id = sa.resource_provider_id
                                              AND rpt.trait_id = @sharing_trait::bigint
  JOIN placement.resource_providers sp ON sp.id = sa.resource_provider_id
 WHERE sa.aggregate_uuid IN (SELECT pa.aggregate_uuid
                               FROM placement.resource_providers p
                               JOIN placement.resource_provider_aggregates pa ON pa.resource_provider_id = p.id
                              WHERE p.root_provider_id = ANY(@roots::bigint[]));
