-- name: ReadPlans :exec
-- The settings of MatchingNodes and FreeNodes, for the rest of the
-- transaction: jit off (at thousands of nodes the planner's estimate
-- passes jit_above_cost, and compiling costs more than running them, as
-- topology's FreeCandidates), and no nested loop: every table is read once
-- and joined by hash whatever the estimates (TestLeaseReadPlansSetBased).
-- FreeNodes' filter on the traits' counts is estimated at one row, and a
-- nested loop under it ran the busy rows' aggregate once per node (1.5 s
-- at 2,500 nodes); a generic plan made while the tables were empty would
-- do the same.
SELECT set_config('jit', 'off', true), set_config('enable_nestloop', 'off', true);

-- name: WritePlans :exec
-- Nested loops again after ReadPlans, for the rest of the transaction
-- (an admission's writes and reads by key).
SELECT set_config('enable_nestloop', 'on', true);

-- name: MatchingNodes :many
-- The reservable nodes of @resource_class (NULL: every class), in id
-- order, with what refusals and availability filter on: maintenance,
-- fits (every trait of @traits and none of @forbidden), the topology path
-- down to the levels @sources ('{}': none; see metalloc_topology_path),
-- and the node's busy intervals [busy_from[i], busy_to[i]) that overlap
-- [@from_time, @until_time): the windows of the rows of other leases than
-- @exclude_lease that still block (not released), in no order (one
-- aggregation pass fills both arrays, so their items pair up). One
-- statement that reads every table once: the busy intervals and the
-- traits are read per table and grouped by node (hash joins), not looked
-- up node by node (10,000 correlated subqueries cost ~0.4 s, the grouping
-- a few ms), and the paths are an expression on each node's row
-- (metalloc_topology_path, migration 00056), not the view
-- node_topology_paths, which computes each node's in a subquery of its
-- own (most of an availability search's time at 10,000 nodes, issue 43);
-- only a level read from traits or aggregates takes the nodes' paths from
-- metalloc_topology_paths, all at once. TestLeaseReadPlansSetBased checks
-- that no plan node runs twice. No locks: the exclusion constraint of
-- lease_nodes refuses a pick that a concurrent admission took meanwhile.
WITH m AS MATERIALIZED (
    SELECT n.id AS nid, n.uuid, n.name, n.resource_class::text AS resource_class, n.maintenance,
           (COALESCE(t.have, 0) = cardinality(@traits::text[]) AND COALESCE(t.bad, 0) = 0)::boolean AS fits,
           COALESCE(b.busy_from, '{}')::timestamptz[] AS busy_from,
           COALESCE(b.busy_to, '{}')::timestamptz[] AS busy_to,
           metalloc_topology_path(@sources::text[], n.extra, n.properties) AS path
      FROM nodes n
      LEFT JOIN (SELECT nt.node_id,
                        count(*) FILTER (WHERE nt.trait = ANY(@traits::text[])) AS have,
                        count(*) FILTER (WHERE nt.trait = ANY(@forbidden::text[])) AS bad
                   FROM node_traits nt
                  WHERE nt.trait = ANY(@traits::text[] || @forbidden::text[])
                  GROUP BY nt.node_id) t ON t.node_id = n.id
      LEFT JOIN (SELECT l.node_id,
                        array_agg(lower(l.during)) AS busy_from,
                        array_agg(upper(l.during)) AS busy_to
                   FROM lease_nodes l
                  WHERE NOT l.released AND l.lease_id <> @exclude_lease::bigint
                    AND l.during && tstzrange(@from_time::timestamptz, @until_time::timestamptz)
                  GROUP BY l.node_id) b ON b.node_id = n.id
     WHERE n.reservable
       AND n.resource_class IS NOT NULL
       AND (sqlc.narg(resource_class)::text IS NULL OR n.resource_class = sqlc.narg(resource_class)::text)
)
SELECT m.nid AS id, m.uuid, m.name, m.resource_class, m.maintenance,
       COALESCE(p.path[1:cardinality(@sources::text[])], m.path)::text[] AS path, m.fits, m.busy_from, m.busy_to
  FROM m
  LEFT JOIN metalloc_topology_paths(ARRAY(SELECT mm.nid FROM m AS mm WHERE array_position(mm.path, NULL) IS NOT NULL))
       AS p (node_id, path) ON p.node_id = m.nid
 ORDER BY m.nid;

-- name: FreeNodes :many
-- Admission's read for one reservation: of the nodes it may take over
-- [@from_time, @until_time) (reservable, of @resource_class, not in
-- maintenance, with every trait of @traits and none of @forbidden, among
-- @among unless it is NULL, no blocking row of another lease overlapping
-- the window), those its pick (choose) needs, in id order, with their
-- topology paths down to the levels @sources (as MatchingNodes). A node's
-- domain is its path when it has a value at every level (none without
-- levels); the domains are ranked by free nodes, the most first, at
-- random among equals. With @want NULL every free node is read (a
-- reservation after another of the same class: the earlier one may take
-- any of them). Else, tens of rows, not thousands: up to @want nodes of
-- the first domain, at random (required, and preferred when it has
-- enough); under @rule preferred also every node of the next domains
-- until @want are read; then, unless @rule is required, when the domains
-- hold fewer than @want, up to the rest among the nodes in no domain, at
-- random (rule none: @want of them). choose makes on them the pick it
-- would make on every free node (TestFreeNodesReadsThePick). Every table
-- read once (TestLeaseReadPlansSetBased).
WITH f AS MATERIALIZED (
    SELECT n.id AS nid,
           CASE WHEN cardinality(@sources::text[]) > 0
                THEN metalloc_topology_path(@sources::text[], n.extra, n.properties) ELSE '{}' END AS path
      FROM nodes n
      LEFT JOIN (SELECT nt.node_id,
                        count(*) FILTER (WHERE nt.trait = ANY(@traits::text[])) AS have,
                        count(*) FILTER (WHERE nt.trait = ANY(@forbidden::text[])) AS bad
                   FROM node_traits nt
                  WHERE nt.trait = ANY(@traits::text[] || @forbidden::text[])
                  GROUP BY nt.node_id) t ON t.node_id = n.id
      LEFT JOIN (SELECT l.node_id
                   FROM lease_nodes l
                  WHERE NOT l.released
                    AND l.during && tstzrange(@from_time::timestamptz, @until_time::timestamptz)
                  GROUP BY l.node_id) b ON b.node_id = n.id
     WHERE n.reservable AND NOT n.maintenance
       AND n.resource_class = @resource_class::text
       AND COALESCE(t.have, 0) = cardinality(@traits::text[]) AND COALESCE(t.bad, 0) = 0
       AND b.node_id IS NULL
       AND (sqlc.narg(among)::bigint[] IS NULL OR n.id = ANY(sqlc.narg(among)::bigint[]))
), fp AS (
    SELECT f.nid, COALESCE(p.path[1:cardinality(@sources::text[])], f.path) AS path
      FROM f
      LEFT JOIN metalloc_topology_paths(ARRAY(SELECT ff.nid FROM f AS ff WHERE array_position(ff.path, NULL) IS NOT NULL))
           AS p (node_id, path) ON p.node_id = f.nid
), fd AS MATERIALIZED (
    SELECT fp.nid, fp.path,
           CASE WHEN cardinality(@sources::text[]) > 0 AND cardinality(fp.path) = cardinality(@sources::text[])
                     AND array_position(fp.path, '') IS NULL
                THEN fp.path END AS domain
      FROM fp
), d AS MATERIALIZED (
    SELECT c.domain, c.free, row_number() OVER w AS place, sum(c.free) OVER w - c.free AS ahead
      FROM (SELECT fd.domain, count(*) AS free FROM fd WHERE fd.domain IS NOT NULL GROUP BY fd.domain) c
    WINDOW w AS (ORDER BY c.free DESC, random() ROWS UNBOUNDED PRECEDING)
)
SELECT u.id, u.path::text[] AS path FROM (
    (SELECT fd.nid AS id, fd.path FROM fd JOIN d ON d.domain = fd.domain
      WHERE d.place = 1
      ORDER BY random() LIMIT sqlc.narg(want)::integer)
    UNION ALL
    SELECT fd.nid, fd.path FROM fd JOIN d ON d.domain = fd.domain
     WHERE d.place > 1
       AND (sqlc.narg(want)::integer IS NULL OR @rule::text = 'preferred' AND d.ahead < sqlc.narg(want)::integer)
    UNION ALL
    (SELECT fd.nid, fd.path FROM fd
      WHERE fd.domain IS NULL AND @rule::text <> 'required'
      ORDER BY random()
      LIMIT sqlc.narg(want)::integer - LEAST(sqlc.narg(want)::integer, (SELECT COALESCE(sum(d.free), 0) FROM d)::integer))
) u
 ORDER BY u.id;

-- name: PoolNodes :many
-- The pool admission picks from (Store's pool cache, pool.go): every
-- reservable node with a class, in id order, with its class, maintenance
-- flag, traits (sorted) and its topology path over the levels @sources
-- (every level of the topology; as MatchingNodes: a level read from
-- traits takes the nodes' paths from metalloc_topology_paths). One pass
-- over each table (traits grouped per node, not looked up node by node).
WITH m AS MATERIALIZED (
    SELECT n.id AS nid, n.resource_class::text AS resource_class, n.maintenance,
           COALESCE(t.traits, '{}')::text[] AS traits,
           metalloc_topology_path(@sources::text[], n.extra, n.properties) AS path
      FROM nodes n
      LEFT JOIN (SELECT nt.node_id, array_agg(nt.trait::text ORDER BY nt.trait::text) AS traits
                   FROM node_traits nt GROUP BY nt.node_id) t ON t.node_id = n.id
     WHERE n.reservable AND n.resource_class IS NOT NULL
)
SELECT m.nid AS id, m.resource_class, m.maintenance, m.traits,
       COALESCE(p.path[1:cardinality(@sources::text[])], m.path)::text[] AS path
  FROM m
  LEFT JOIN metalloc_topology_paths(ARRAY(SELECT mm.nid FROM m AS mm WHERE array_position(mm.path, NULL) IS NOT NULL))
       AS p (node_id, path) ON p.node_id = m.nid
 ORDER BY m.nid;

-- name: BusyNodes :one
-- The nodes that a blocking row (not released) of any lease holds over
-- part of [@from_time, @until_time): what admission leaves out of the
-- pool (pool.go); one array, a node once per row (lease_nodes_during_idx).
SELECT COALESCE(array_agg(l.node_id), '{}')::bigint[] AS node_ids
  FROM lease_nodes l
 WHERE NOT l.released AND l.during && tstzrange(@from_time::timestamptz, @until_time::timestamptz);

-- name: BusyIntervals :one
-- The blocking rows (not released) that overlap [@from_unix, @until_unix)
-- (Unix seconds): row i holds node node_ids[i] over [busy_from[i],
-- busy_to[i]) (Unix seconds), in no order, in three arrays of one row:
-- the availability search's read beside the pool copy (pool.go). On the
-- stored bounds (migration 00057), compared as bigints: a period of days
-- overlaps most rows, read in one pass.
SELECT COALESCE(array_agg(l.node_id), '{}')::bigint[] AS node_ids,
       COALESCE(array_agg(l.busy_from), '{}')::bigint[] AS busy_from,
       COALESCE(array_agg(l.busy_to), '{}')::bigint[] AS busy_to
  FROM lease_nodes l
 WHERE NOT l.released AND l.busy_from < @until_unix::bigint AND l.busy_to > @from_unix::bigint;

-- name: PickedNodes :many
-- Of the nodes @ids (a pick made on the pool cache), those a reservation
-- of @resource_class with @traits and none of @forbidden may still take
-- (reservable, not in maintenance), by key, with their topology paths
-- over @sources (as PoolNodes): what admission checks a cached pick
-- against before it books it (pool.go). Whether they are free is the
-- exclusion constraint's part, at the insert.
WITH m AS MATERIALIZED (
    SELECT n.id AS nid, metalloc_topology_path(@sources::text[], n.extra, n.properties) AS path
      FROM nodes n
     WHERE n.id = ANY(@ids::bigint[])
       AND n.reservable AND NOT n.maintenance AND n.resource_class = @resource_class::text
       AND NOT EXISTS (SELECT FROM node_traits nt WHERE nt.node_id = n.id AND nt.trait = ANY(@forbidden::text[]))
       AND (SELECT count(*) FROM node_traits nt WHERE nt.node_id = n.id AND nt.trait = ANY(@traits::text[]))
           = cardinality(@traits::text[])
)
SELECT m.nid AS id, COALESCE(p.path[1:cardinality(@sources::text[])], m.path)::text[] AS path
  FROM m
  LEFT JOIN metalloc_topology_paths(ARRAY(SELECT mm.nid FROM m AS mm WHERE array_position(mm.path, NULL) IS NOT NULL))
       AS p (node_id, path) ON p.node_id = m.nid
 ORDER BY m.nid;

-- name: CreateLease :one
INSERT INTO leases (uuid, name, project_id, start_time, end_time, on_start)
VALUES (@uuid, @name, @project_id, @start_time, @end_time, @on_start)
RETURNING *;

-- name: CreateReservation :one
INSERT INTO lease_reservations (lease_id, resource_class, traits, forbidden_traits, count, rule, rule_level, domain,
                                min_count, max_count)
VALUES (@lease_id, @resource_class, @traits, @forbidden_traits, @count, @rule, @rule_level, @domain,
        sqlc.narg(min_count), sqlc.narg(max_count))
RETURNING id;

-- name: LockNodesForBooking :one
-- Takes a transaction-scoped advisory lock per node of @node_ids, key
-- (@class, the id modulo 2^31), in key order, before the node is booked
-- (InsertLeaseNodes, ReplaceLeaseNode, SetLeaseEnd): two transactions
-- that book some of the same nodes then book them one after the other.
-- The exclusion constraint alone would let both insert their rows and
-- each wait for the other's (its check comes after the insert) until
-- PostgreSQL's deadlock check (deadlock_timeout, a second) aborts one.
SELECT count(pg_advisory_xact_lock(@class::int4, k.key))
  FROM (SELECT DISTINCT (u.id % 2147483648)::int4 AS key
          FROM unnest(@node_ids::bigint[]) u (id) ORDER BY 1) k;

-- name: InsertLeaseNodes :exec
-- Books the nodes for the lease's window (the exclusion constraint
-- lease_nodes_no_overlap refuses one another lease holds over it; the
-- caller locks them first: LockNodesForBooking).
INSERT INTO lease_nodes (lease_id, reservation_id, node_id, during)
SELECT @lease_id::bigint, (@reservation_ids::bigint[])[u.ord], u.node_id,
       tstzrange(@start_time::timestamptz, @end_time::timestamptz)
  FROM unnest(@node_ids::bigint[]) WITH ORDINALITY u (node_id, ord);

-- name: GetLeaseByUUID :one
SELECT * FROM leases WHERE uuid = @uuid;

-- name: GetLeaseByName :one
SELECT * FROM leases WHERE name = @name;

-- name: LockLease :one
SELECT * FROM leases WHERE id = @id FOR UPDATE;

-- name: ListLeases :many
-- One page of leases in id order after @after, filtered by the non-null
-- arguments.
SELECT * FROM leases l
 WHERE l.id > @after::bigint
   AND (sqlc.narg(state)::text IS NULL OR l.state = sqlc.narg(state)::text)
   AND (sqlc.narg(project_id)::text IS NULL OR l.project_id = sqlc.narg(project_id)::text)
 ORDER BY l.id
 LIMIT @max_rows;

-- name: ReservationsOf :many
-- The reservations of the given leases, in id order.
SELECT * FROM lease_reservations r WHERE r.lease_id = ANY(@lease_ids::bigint[]) ORDER BY r.id;

-- name: NodesOf :many
-- The booked nodes of the given leases, per reservation, in node id order.
SELECT ln.reservation_id, n.uuid, n.name
  FROM lease_nodes ln JOIN nodes n ON n.id = ln.node_id
 WHERE ln.lease_id = ANY(@lease_ids::bigint[])
 ORDER BY ln.reservation_id, n.id;

-- name: SetLeaseEnd :exec
-- PATCH end_time: the lease and its blocking rows in one transaction (the
-- caller's); the exclusion constraint refuses an extension over another
-- lease's row. A new end_time gets its own lease.ending (conductor/leases.go).
WITH l AS (
    UPDATE leases SET end_time = @end_time, ending_noticed_at = NULL, updated_at = now() WHERE id = @id
)
UPDATE lease_nodes SET during = tstzrange(lower(during), @end_time::timestamptz)
 WHERE lease_id = @id AND NOT released;

-- name: SetLeaseName :exec
UPDATE leases SET name = @name, updated_at = now() WHERE id = @id;

-- name: EndConflicts :many
-- The rows of other leases that the extension of lease @id to @end_time
-- would overlap: node and lease, for the 409's reason.
SELECT n.uuid AS node_uuid, n.name AS node_name, o.uuid AS lease_uuid,
       lower(b.during)::timestamptz AS busy_from
  FROM lease_nodes a
  JOIN lease_nodes b ON b.node_id = a.node_id AND b.lease_id <> a.lease_id AND NOT b.released
                    AND b.during && tstzrange(lower(a.during), @end_time::timestamptz)
  JOIN nodes n ON n.id = a.node_id
  JOIN leases o ON o.id = b.lease_id
 WHERE a.lease_id = @id AND NOT a.released
 ORDER BY lower(b.during), n.id;

-- name: CancelLease :exec
-- Cancels a lease: its nodes stop blocking (the rows stay, released).
WITH l AS (
    UPDATE leases SET state = 'cancelled', status_reason = @reason, updated_at = now() WHERE id = @id
)
UPDATE lease_nodes SET released = true WHERE lease_id = @id;

-- name: DeleteLease :exec
-- Deletes a lease with its reservations and rows (ON DELETE CASCADE).
DELETE FROM leases WHERE id = @id;

-- name: CalendarNodes :many
-- The lease calendar's nodes (GET /v1/ui/leases): every reservable node
-- of @resource_class (NULL: every class), and every other node of it that
-- a lease still holds over [@from_time, @until_time), in id order, with
-- its class, maintenance and reservable flags, its topology path down to
-- the levels @sources (as MatchingNodes), and the blocking rows (not
-- released) that overlap the period: lease lease_ids[i] holds it over
-- [busy_from[i], busy_to[i]) (one aggregation pass fills the three
-- arrays, so their items pair up). Grouped per table, as MatchingNodes;
-- no locks.
WITH c AS MATERIALIZED (
    SELECT n.id, n.resource_class::text AS resource_class, n.maintenance, n.reservable,
           metalloc_topology_path(@sources::text[], n.extra, n.properties) AS path,
           COALESCE(b.lease_ids, '{}')::bigint[] AS lease_ids,
           COALESCE(b.busy_from, '{}')::timestamptz[] AS busy_from,
           COALESCE(b.busy_to, '{}')::timestamptz[] AS busy_to
      FROM nodes n
      LEFT JOIN (SELECT l.node_id,
                        array_agg(l.lease_id) AS lease_ids,
                        array_agg(lower(l.during)) AS busy_from,
                        array_agg(upper(l.during)) AS busy_to
                   FROM lease_nodes l
                  WHERE NOT l.released
                    AND l.during && tstzrange(@from_time::timestamptz, @until_time::timestamptz)
                  GROUP BY l.node_id) b ON b.node_id = n.id
     WHERE (n.reservable OR b.node_id IS NOT NULL)
       AND n.resource_class IS NOT NULL
       AND (sqlc.narg(resource_class)::text IS NULL OR n.resource_class = sqlc.narg(resource_class)::text)
)
SELECT c.id, c.resource_class, c.maintenance, c.reservable,
       COALESCE(p.path[1:cardinality(@sources::text[])], c.path)::text[] AS path,
       c.lease_ids, c.busy_from, c.busy_to
  FROM c
  LEFT JOIN metalloc_topology_paths(ARRAY(SELECT cc.id FROM c AS cc WHERE array_position(cc.path, NULL) IS NOT NULL))
       AS p (node_id, path) ON p.node_id = c.id
 ORDER BY c.id;

-- name: CalendarLeases :many
-- The leases of the given ids (those of a calendar), by start time.
SELECT * FROM leases l WHERE l.id = ANY(@lease_ids::bigint[]) ORDER BY l.start_time, l.id;

-- name: BookedNodes :many
-- The nodes lease @lease_id books (its blocking rows), in node id order,
-- each with its reservation and whether it is in maintenance (Repair).
SELECT ln.node_id, ln.reservation_id, n.uuid, n.name, n.maintenance
  FROM lease_nodes ln JOIN nodes n ON n.id = ln.node_id
 WHERE ln.lease_id = @lease_id AND NOT ln.released
 ORDER BY ln.node_id;

-- name: ReplaceLeaseNode :execrows
-- Swaps node @old_node_id of lease @lease_id's blocking rows for
-- @new_node_id, same reservation and window: the exclusion constraint
-- refuses a node another lease holds over the window (SQLSTATE 23P01).
UPDATE lease_nodes SET node_id = @new_node_id
 WHERE lease_id = @lease_id AND node_id = @old_node_id AND NOT released;

-- name: SetLeaseDegraded :exec
-- The lease's flag after a check of its nodes (Repair): why it lacks
-- nodes, or NULL when it has them all.
UPDATE leases SET degraded_reason = sqlc.narg(reason)::text, updated_at = now() WHERE id = @id;

-- name: NodesFreeNow :many
-- Which of the nodes @ids are free now (metalloc_node_free: available, not
-- in maintenance, powered, no instance or allocation): the replacements of
-- an active lease's refused nodes (ReplaceRefused) must be.
SELECT n.id FROM nodes n
 WHERE n.id = ANY(@ids::bigint[])
   AND metalloc_node_free(n.provision_state, n.maintenance, n.power_state, n.instance_uuid, n.allocation_id)
 ORDER BY n.id;
