-- +goose Up
-- Kind: expand. An index only: binaries built for 00053 never use it.
-- A lease's allocation that its backend failed at the start (in front of
-- Ironic: Ironic refused the node) has its node replaced by the
-- conductors (conductor/leases_refused.go), which look for such
-- allocations every second (LeasesWithRefusedNodes, by lease): a partial
-- index that holds only the leases' own allocations in error, a handful
-- whatever the size of allocations (the end of a lease deletes them).
CREATE INDEX allocations_lease_error_idx ON allocations ((extra->>'lease_uuid'))
    WHERE state = 'error' AND (extra->>'lease_uuid') IS NOT NULL;

-- +goose Down
DROP INDEX allocations_lease_error_idx;
