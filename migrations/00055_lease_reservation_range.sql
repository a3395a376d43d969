-- +goose Up
-- Kind: expand. Two nullable columns on lease_reservations: binaries built
-- before it never read or write them (sqlc names the columns it reads).
-- A reservation made through Blazar's API (lease/blazar) asks for a range
-- of hosts, min and max; admission books max when they fit, else the most
-- between min and max that do, and count is what it booked. The range is
-- kept so that Blazar's lease show and list give back what was asked, as
-- Blazar does. NULL for a reservation made through /v1/leases (an exact
-- count; Blazar's API shows it as min = max = count) and for those made
-- before this migration.
ALTER TABLE lease_reservations
    ADD COLUMN min_count integer,
    ADD COLUMN max_count integer,
    ADD CONSTRAINT lease_reservations_range_check
        CHECK ((min_count IS NULL) = (max_count IS NULL) AND min_count BETWEEN 1 AND count AND count <= max_count);

-- +goose Down
ALTER TABLE lease_reservations DROP COLUMN min_count, DROP COLUMN max_count;
