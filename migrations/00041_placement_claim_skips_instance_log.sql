-- +goose Up
-- Kind: expand. A function's options and a trigger created again.
-- The placement claim reserves its nodes without calling
-- nodes_notify_instance (issue 29: the placement backend's burst). That
-- trigger logs a node whose instance changed for the resource tracker
-- unless a placement_claims row explains the change. Every node
-- metalloc_claim_reserve_placement reserves has that row, written by the
-- same claim, so the trigger always decided to log nothing, after a
-- PL/pgSQL call and two lookups per node (6-11 µs per allocation,
-- claim by claim, 2,000 allocations in batches of 8). The claim runs with
-- metalloc.placement_claimed on (a function setting: restored when it
-- returns, so a later change in the same transaction is logged), and the
-- trigger's WHEN skips the call then. The claim changes no node but by
-- these reservations.
ALTER FUNCTION metalloc_claim_reserve_placement(bigint, integer, text, text)
    SET metalloc.placement_claimed = 'on';
DROP TRIGGER nodes_notify_instance ON nodes;
CREATE TRIGGER nodes_notify_instance AFTER UPDATE OF instance_uuid ON nodes
    FOR EACH ROW WHEN (OLD.instance_uuid IS DISTINCT FROM NEW.instance_uuid
                       AND current_setting('metalloc.placement_claimed', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION nodes_notify_instance();

-- +goose Down
DROP TRIGGER nodes_notify_instance ON nodes;
CREATE TRIGGER nodes_notify_instance AFTER UPDATE OF instance_uuid ON nodes
    FOR EACH ROW WHEN (OLD.instance_uuid IS DISTINCT FROM NEW.instance_uuid)
    EXECUTE FUNCTION nodes_notify_instance();
ALTER FUNCTION metalloc_claim_reserve_placement(bigint, integer, text, text)
    RESET metalloc.placement_claimed;
