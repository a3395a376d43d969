-- name: ListLevels :many
-- The topology, coarse to fine.
SELECT position, name, source, updated_at FROM topology_levels ORDER BY position;

-- name: LockLevels :exec
-- Serialises writers of the topology (readers are not blocked): two
-- concurrent replacements would otherwise both delete the old rows and then
-- collide inserting the new ones.
LOCK TABLE topology_levels IN EXCLUSIVE MODE;

-- name: JITOff :exec
-- FreeCandidates' statement: the planner's estimate for the paths' per-row
-- subqueries passes jit_above_cost at a few thousand nodes, and compiling
-- costs more than running it (as for metalloc_pick).
SET LOCAL jit = off;

-- name: DeleteLevels :exec
DELETE FROM topology_levels;

-- name: InsertLevels :exec
-- Inserts the levels in order, position 0 first.
INSERT INTO topology_levels (position, name, source, updated_at)
SELECT (l.ord - 1)::integer, l.name, (@sources::text[])[l.ord], now()
  FROM unnest(@names::text[]) WITH ORDINALITY l (name, ord);

-- name: FreeCandidates :many
-- The free nodes a group may take, with their topology paths: the same
-- predicates as metalloc_pick (free_nodes, metalloc_node_in_scope,
-- metalloc_node_on_demand,
-- metalloc_node_has_traits), in id order, without locking anything. Run
-- with jit off (see FreeCandidates).
SELECT n.id, n.uuid, p.path::text[] AS path
  FROM free_nodes n JOIN node_topology_paths p ON p.id = n.id
 WHERE n.resource_class = @resource_class::text
   AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, sqlc.narg(candidates)::uuid[], sqlc.narg(owner)::text)
   AND metalloc_node_on_demand(n.reservable, n.lessee, sqlc.narg(owner)::text)
   AND metalloc_node_has_traits(n.traits, @traits::text[])
 ORDER BY n.id;

-- name: NodePaths :many
-- Every node of @resource_class (NULL: any class) with all of @traits,
-- with its path and whether it is free (metalloc_node_free), for the tree
-- `metalloc-manage topology show` prints.
SELECT n.id, p.path::text[] AS path,
       metalloc_node_free(n.provision_state, n.maintenance, n.power_state,
                          n.instance_uuid, n.allocation_id)::boolean AS free
  FROM nodes n JOIN node_topology_paths p ON p.id = n.id
 WHERE (sqlc.narg(resource_class)::text IS NULL OR n.resource_class = sqlc.narg(resource_class)::text)
   AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t WHERE t.node_id = n.id), @traits::text[])
 ORDER BY n.id;
