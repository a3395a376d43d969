-- +goose Up
-- Kind: expand. Three nullable columns on conductors that only this
-- release reads and writes: a binary built for 00047 neither names nor
-- needs them (its registration leaves them as they are, and it never
-- drains, so `conductor drain` waits on it until its --timeout).
-- `metalloc-manage conductor drain HOST` (issue 41): the command sets
-- drain_requested_at on a live conductor's row and sends NOTIFY
-- metalloc_allocations 'drain:<id>'; the conductor (listening on that
-- channel, or at its next heartbeat) stops claiming, finishes its
-- in-flight rows within conductor.shutdown_grace, releases the rest
-- unowned and writes drained_at and drain_released (how many rows it
-- handed back), then stays registered and idle until it is stopped. A
-- registration (a restart) clears all three.
ALTER TABLE conductors
    ADD COLUMN drain_requested_at timestamptz,
    ADD COLUMN drained_at timestamptz,
    ADD COLUMN drain_released bigint;

-- +goose Down
ALTER TABLE conductors
    DROP COLUMN drain_requested_at,
    DROP COLUMN drained_at,
    DROP COLUMN drain_released;
