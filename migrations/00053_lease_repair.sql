-- +goose Up
-- Kind: expand. A nullable column on leases, a partial index on nodes and
-- two more event kinds: binaries built for 00050 never read or write them
-- (they neither replace failed nodes nor flag leases).
-- A leased node that fails before the start (in maintenance, deleted) is
-- replaced by the conductors with another that fits the same reservation
-- and domain (conductor/leases_replace.go, lease/replace.go); when none
-- is free the lease is flagged: degraded_reason says why (NULL: the lease
-- has every node it asked for, in working order). It is cleared when a
-- later check replaces the rest.
ALTER TABLE leases ADD COLUMN degraded_reason text;
-- The conductors' scan for booked nodes in maintenance (LeasesToRepair,
-- every second): a partial index that holds only the reservable nodes in
-- maintenance, so the scan reads a handful of entries whatever the fleet's
-- size; its columns change rarely (the claims' updates stay HOT).
CREATE INDEX nodes_reservable_maintenance_idx ON nodes (id) WHERE maintenance AND reservable;
-- Their events, on the allocation event log as the other lease events:
-- lease.node_replaced (last_error names the node replaced, why, and its
-- replacement) and lease.degraded (last_error: degraded_reason).
ALTER TABLE allocation_events DROP CONSTRAINT allocation_events_kind_check;
ALTER TABLE allocation_events ADD CONSTRAINT allocation_events_kind_check
    CHECK (kind IN ('created', 'updated', 'deleted', 'group_created', 'group_updated', 'group_deleted',
                    'lease.start', 'lease.end', 'lease.ending', 'lease.node_replaced', 'lease.degraded'));

-- +goose Down
DELETE FROM allocation_events WHERE kind IN ('lease.node_replaced', 'lease.degraded');
ALTER TABLE allocation_events DROP CONSTRAINT allocation_events_kind_check;
ALTER TABLE allocation_events ADD CONSTRAINT allocation_events_kind_check
    CHECK (kind IN ('created', 'updated', 'deleted', 'group_created', 'group_updated', 'group_deleted',
                    'lease.start', 'lease.end', 'lease.ending'));
DROP INDEX nodes_reservable_maintenance_idx;
ALTER TABLE leases DROP COLUMN degraded_reason;
