-- +goose Up
-- Kind: contract. placement.allocations loses the foreign keys whose cascade
-- a consumer delete of metalloc-placement built for 00042 relied on (its
-- allocations would outlive the consumer).
-- placement.allocations without foreign keys, as OpenStack Placement's
-- table (issue 29: the placement backend's burst). Each allocation the
-- placement claim wrote ran two referential checks (a lookup and a key
-- share lock of the consumer and of the provider) and queued two
-- after-trigger events: 11 µs per allocation of the claim's writes, claim
-- by claim with pg_stat_statements (2,000 allocations in batches of 8).
--
-- What the keys guaranteed, and what does now:
--   - no allocation of a deleted provider: every writer of allocations
--     locks their providers first (the Placement API's writes and the
--     conductors' in-process claims in id order, FOR UPDATE; the claim of
--     migration 00042 likewise), and DELETE /resource_providers/{uuid}
--     locks the provider before it looks for allocations (409 inuse). A
--     write after the delete finds no provider to lock (400, or the pick
--     refused), a write before it is seen by the delete's check;
--   - no allocation of a deleted consumer: every path that deletes a
--     consumer deletes its allocations first, with the consumer locked
--     (DELETE /allocations/{consumer}, a PUT that leaves a consumer without
--     allocations, metalloc_placement_release below, which relied on the
--     cascade), and a writer allocates only for a consumer it locked or
--     created itself.
-- TestProviderDeleteRacesAllocationWrites races both.
ALTER TABLE placement.allocations
    DROP CONSTRAINT allocations_consumer_id_fkey,
    DROP CONSTRAINT allocations_resource_provider_id_fkey;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_placement_release(p_consumer uuid) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_cons bigint;
BEGIN
    SELECT c.id INTO v_cons FROM placement.consumers c WHERE c.uuid = p_consumer FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE placement.resource_providers p SET generation = p.generation + 1, updated_at = now()
     WHERE p.id IN (SELECT a.resource_provider_id FROM placement.allocations a WHERE a.consumer_id = v_cons);
    DELETE FROM placement.allocations a WHERE a.consumer_id = v_cons;
    DELETE FROM placement.consumers c WHERE c.id = v_cons;
    DELETE FROM placement_claims pc WHERE pc.consumer_uuid = p_consumer;
    RETURN true;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_placement_release(p_consumer uuid) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_cons bigint;
BEGIN
    SELECT c.id INTO v_cons FROM placement.consumers c WHERE c.uuid = p_consumer FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE placement.resource_providers p SET generation = p.generation + 1, updated_at = now()
     WHERE p.id IN (SELECT a.resource_provider_id FROM placement.allocations a WHERE a.consumer_id = v_cons);
    DELETE FROM placement.consumers c WHERE c.id = v_cons; -- its allocations cascade
    DELETE FROM placement_claims pc WHERE pc.consumer_uuid = p_consumer;
    RETURN true;
END;
$$;
-- +goose StatementEnd
ALTER TABLE placement.allocations
    ADD CONSTRAINT allocations_consumer_id_fkey FOREIGN KEY (consumer_id)
        REFERENCES placement.consumers(id) ON DELETE CASCADE,
    ADD CONSTRAINT allocations_resource_provider_id_fkey FOREIGN KEY (resource_provider_id)
        REFERENCES placement.resource_providers(id);
