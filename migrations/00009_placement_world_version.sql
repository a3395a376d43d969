-- +goose Up
-- Kind: expand. A new table and its triggers.
-- A version of what GET /allocation_candidates reads besides usage: the
-- providers' identity and trees, their inventories, traits and aggregates.
-- metalloc-placement caches those rows per process and reloads them only
-- when world_version.v differs from the cached one, read in the same
-- snapshot as the usage (so the cache is exact, never stale).
--
-- The bump is a deferred constraint trigger: it runs at COMMIT, once per
-- transaction (a transaction-local setting remembers it), so the row lock
-- on the counter is the last lock a writer takes and is held only while it
-- commits (no deadlock with provider locks, and concurrent inventory
-- writers are serialized only for their commits). Allocations and
-- generation bumps do not touch it: claims never wait on it.
CREATE TABLE placement.world_version (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    v   bigint  NOT NULL
);
INSERT INTO placement.world_version (one, v) VALUES (true, 1);

-- +goose StatementBegin
CREATE FUNCTION placement.bump_world_version() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_LEVEL = 'STATEMENT' THEN
        UPDATE placement.world_version SET v = v + 1;
        RETURN NULL;
    END IF;
    IF current_setting('metalloc.world_bumped', true) IS DISTINCT FROM 'y' THEN
        UPDATE placement.world_version SET v = v + 1;
        PERFORM set_config('metalloc.world_bumped', 'y', true);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER world_version_providers
    AFTER INSERT OR DELETE OR UPDATE OF id, uuid, parent_provider_id, root_provider_id
    ON placement.resource_providers DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION placement.bump_world_version();
CREATE CONSTRAINT TRIGGER world_version_inventories
    AFTER INSERT OR DELETE OR UPDATE ON placement.inventories DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION placement.bump_world_version();
CREATE CONSTRAINT TRIGGER world_version_traits
    AFTER INSERT OR DELETE OR UPDATE ON placement.resource_provider_traits DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION placement.bump_world_version();
CREATE CONSTRAINT TRIGGER world_version_aggregates
    AFTER INSERT OR DELETE OR UPDATE ON placement.resource_provider_aggregates DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION placement.bump_world_version();
CREATE TRIGGER world_version_truncate
    AFTER TRUNCATE ON placement.resource_providers
    FOR EACH STATEMENT EXECUTE FUNCTION placement.bump_world_version();
CREATE TRIGGER world_version_truncate
    AFTER TRUNCATE ON placement.inventories
    FOR EACH STATEMENT EXECUTE FUNCTION placement.bump_world_version();
CREATE TRIGGER world_version_truncate
    AFTER TRUNCATE ON placement.resource_provider_traits
    FOR EACH STATEMENT EXECUTE FUNCTION placement.bump_world_version();
CREATE TRIGGER world_version_truncate
    AFTER TRUNCATE ON placement.resource_provider_aggregates
    FOR EACH STATEMENT EXECUTE FUNCTION placement.bump_world_version();

-- +goose Down
DROP TABLE placement.world_version;
DROP FUNCTION placement.bump_world_version() CASCADE;
