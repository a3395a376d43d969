-- +goose Up
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

-- A claim of a new consumer in one round trip (PUT /allocations/{consumer}
-- of a consumer that does not exist yet, metalloc-placement's most common
-- write): locks the named providers in id order, then (in a statement of
-- its own, so it sees every allocation committed before the locks were
-- granted) checks every amount against its inventory as Placement's
-- _check_capacity_exceeded, and only then creates the consumer (generation
-- 1), inserts the allocations in the order given and bumps the providers'
-- generations. It answers false, having written nothing, for anything else
-- (an unknown provider or class, a missing inventory, a constraint or
-- capacity violation, an existing consumer): the caller then runs the
-- general transaction, which gives Placement's exact error.
-- +goose StatementBegin
CREATE FUNCTION placement.claim_new_consumer(p_consumer uuid, p_project text, p_user text, p_type text,
    p_providers uuid[], p_classes text[], p_used bigint[]) RETURNS boolean
    LANGUAGE plpgsql
    -- Index lookups only: a table with no statistics yet (a new
    -- deployment's allocations) must not be scanned whole on every claim.
    SET enable_seqscan = off
    AS $$
DECLARE
    ids bigint[];
    n_ok bigint;
    cid bigint;
BEGIN
    SELECT array_agg(l.id) INTO ids
      FROM (SELECT id FROM placement.resource_providers WHERE uuid = ANY(p_providers) ORDER BY id FOR UPDATE) l;
    IF cardinality(ids) IS DISTINCT FROM (SELECT count(DISTINCT u) FROM unnest(p_providers) u) THEN
        RETURN false;
    END IF;
    SELECT count(*) INTO n_ok
      FROM unnest(p_providers, p_classes, p_used) AS c(pu, cls, amt)
      JOIN placement.resource_providers p ON p.uuid = c.pu
      JOIN placement.resource_classes rc ON rc.name = c.cls
      JOIN placement.inventories i ON i.resource_provider_id = p.id AND i.resource_class_id = rc.id
     WHERE c.amt >= i.min_unit AND c.amt <= i.max_unit AND c.amt % i.step_size = 0
       AND (i.total::bigint - i.reserved)::float8 * i.allocation_ratio >=
           (COALESCE((SELECT sum(a.used) FROM placement.allocations a
                       WHERE a.resource_provider_id = i.resource_provider_id
                         AND a.resource_class_id = i.resource_class_id), 0) + c.amt)::float8;
    IF n_ok <> cardinality(p_providers) THEN
        RETURN false;
    END IF;
    INSERT INTO placement.consumers (uuid, project_id, user_id, consumer_type, generation)
    VALUES (p_consumer, p_project, p_user, p_type, 1)
    ON CONFLICT (uuid) DO NOTHING
    RETURNING id INTO cid;
    IF cid IS NULL THEN
        RETURN false;
    END IF;
    INSERT INTO placement.allocations (resource_provider_id, consumer_id, resource_class_id, used)
    SELECT p.id, cid, rc.id, c.amt
      FROM unnest(p_providers, p_classes, p_used) WITH ORDINALITY AS c(pu, cls, amt, ord)
      JOIN placement.resource_providers p ON p.uuid = c.pu
      JOIN placement.resource_classes rc ON rc.name = c.cls
     ORDER BY c.ord;
    UPDATE placement.resource_providers SET generation = generation + 1, updated_at = now()
     WHERE id = ANY(ids);
    RETURN true;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION placement.claim_new_consumer(uuid, text, text, text, uuid[], text[], bigint[]);
DROP TABLE placement.world_version;
DROP FUNCTION placement.bump_world_version() CASCADE;
