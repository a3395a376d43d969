-- +goose Up
-- Kind: expand. A log table and triggers that still notify metalloc_nodes as
-- before, so a tracker built for 00026 keeps working (reading every node).
-- The placement backend from the first second (issue 29).
--
-- 1. Which nodes changed, not only that some did. While a resource tracker
--    runs (placement_trackers has a row), every change of what it mirrors
--    (a node created or deleted; its name, class, provision or power
--    state, maintenance, properties or traits; its instance, unless that
--    is the instance of a claim the placement backend logged on it) is
--    logged here, in the changing transaction, and notified on
--    metalloc_nodes as before. A tracker's pass reads the log in order and
--    mirrors only those nodes, then deletes the entries it read, where it
--    used to read every node: a node made available is mirrored a moment
--    after its commit whatever the fleet's size, and nothing is lost when
--    no tracker listens at the moment of the commit (the log is read by
--    the next pass).
CREATE TABLE placement_node_changes (
    seq       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node_id   bigint NOT NULL,
    node_uuid uuid   NOT NULL
);
-- A queue: vacuumed early, as allocations is.
ALTER TABLE placement_node_changes SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 200,
    autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_insert_threshold = 200,
    autovacuum_vacuum_cost_delay = 0);

-- What the resource tracker mirrors of each node (conductor/tracker.go),
-- with what placement_synced last recorded for it (NULL: never synced):
-- one definition for its full pass (pages by id) and its passes over the
-- change log (by id). available: the node can be allocated (the
-- conductor's candidate conditions); unavailable nodes are fully
-- reserved. claimed: free but for holding the allocation the placement
-- backend claimed in Placement for it: that claim already uses the node's
-- whole inventory, so there is nothing to reserve. cpus, memory_mb,
-- local_gb: the node's properties as integers (0 when missing or not a
-- whole number, as Nova's ironic driver ignores them).
CREATE VIEW tracker_nodes AS
SELECT n.id, n.uuid,
       coalesce(n.name, n.uuid::text)::text AS name,
       coalesce(n.resource_class, '')::text AS resource_class,
       metalloc_node_free(n.provision_state, n.maintenance, n.power_state,
                          n.instance_uuid, n.allocation_id)::bool AS available,
       (metalloc_node_free(n.provision_state, n.maintenance, n.power_state, NULL, NULL)
            AND EXISTS (SELECT 1 FROM placement_claims c
                         WHERE c.consumer_uuid = n.instance_uuid AND c.provider_uuid = n.uuid))::bool AS claimed,
       (CASE WHEN n.properties->>'cpus' ~ '^\s*[0-9]{1,12}\s*$'
             THEN (n.properties->>'cpus')::bigint ELSE 0 END)::bigint AS cpus,
       (CASE WHEN n.properties->>'memory_mb' ~ '^\s*[0-9]{1,12}\s*$'
             THEN (n.properties->>'memory_mb')::bigint ELSE 0 END)::bigint AS memory_mb,
       (CASE WHEN n.properties->>'local_gb' ~ '^\s*[0-9]{1,12}\s*$'
             THEN (n.properties->>'local_gb')::bigint ELSE 0 END)::bigint AS local_gb,
       coalesce((SELECT array_agg(t.trait ORDER BY t.trait) FROM node_traits t WHERE t.node_id = n.id),
                '{}')::text[] AS traits,
       s.fingerprint AS synced_fingerprint
  FROM nodes n
  LEFT JOIN placement_synced s ON s.node_uuid = n.uuid;

-- +goose StatementBegin
-- Statement-level, with transition tables: nodes inserted (new_rows) or
-- deleted (old_rows), node traits inserted, updated or deleted.
CREATE FUNCTION placement_log_node_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM placement_trackers) THEN
        RETURN NULL;
    END IF;
    IF TG_TABLE_NAME = 'nodes' AND TG_OP = 'INSERT' THEN
        INSERT INTO placement_node_changes (node_id, node_uuid) SELECT r.id, r.uuid FROM new_rows r;
    ELSIF TG_TABLE_NAME = 'nodes' THEN
        INSERT INTO placement_node_changes (node_id, node_uuid) SELECT r.id, r.uuid FROM old_rows r;
    ELSIF TG_OP = 'DELETE' THEN
        -- A node deleted with its traits logs itself (its row is gone
        -- here). Each node's uuid is a probe of the primary key: a join
        -- would be planned without statistics on the transition table
        -- (a scan of every node, 250 buffers per trait write at 10,000
        -- nodes).
        INSERT INTO placement_node_changes (node_id, node_uuid)
        SELECT x.node_id, x.node_uuid
          FROM (SELECT r.node_id, (SELECT n.uuid FROM nodes n WHERE n.id = r.node_id) AS node_uuid
                  FROM (SELECT DISTINCT o.node_id FROM old_rows o) r) x
         WHERE x.node_uuid IS NOT NULL;
    ELSE
        INSERT INTO placement_node_changes (node_id, node_uuid)
        SELECT x.node_id, x.node_uuid
          FROM (SELECT r.node_id, (SELECT n.uuid FROM nodes n WHERE n.id = r.node_id) AS node_uuid
                  FROM (SELECT DISTINCT w.node_id FROM new_rows w) r) x
         WHERE x.node_uuid IS NOT NULL;
    END IF;
    PERFORM pg_notify('metalloc_nodes', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Row-level: a node's mirrored columns changed (nodes_notify_update's
-- condition).
CREATE FUNCTION placement_log_node() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM placement_trackers) THEN
        INSERT INTO placement_node_changes (node_id, node_uuid) VALUES (NEW.id, NEW.uuid);
        PERFORM pg_notify('metalloc_nodes', '');
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Row-level, for a node's instance_uuid changing. Nothing is logged when
-- the node takes the instance of a claim the placement backend logged for
-- it, nor when it gives such an instance up (metalloc_deallocate releases
-- that claim in the same transaction, below): the claim uses the node's
-- whole inventory in Placement, so its provider stays as it was while
-- the node was available (the tracker mirrors a claimed node as
-- available).
CREATE OR REPLACE FUNCTION nodes_notify_instance() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM placement_trackers)
       AND NOT (NEW.instance_uuid IS NOT NULL
                AND EXISTS (SELECT 1 FROM placement_claims c
                             WHERE c.consumer_uuid = NEW.instance_uuid AND c.provider_uuid = NEW.uuid))
       AND NOT (NEW.instance_uuid IS NULL AND OLD.instance_uuid IS NOT NULL
                AND EXISTS (SELECT 1 FROM placement_claims c
                             WHERE c.consumer_uuid = OLD.instance_uuid AND c.provider_uuid = NEW.uuid)) THEN
        INSERT INTO placement_node_changes (node_id, node_uuid) VALUES (NEW.id, NEW.uuid);
        PERFORM pg_notify('metalloc_nodes', '');
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER nodes_notify ON nodes;
DROP TRIGGER nodes_notify_update ON nodes;
DROP TRIGGER node_traits_notify ON node_traits;
CREATE TRIGGER nodes_log_insert AFTER INSERT ON nodes REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION placement_log_node_rows();
CREATE TRIGGER nodes_log_delete AFTER DELETE ON nodes REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION placement_log_node_rows();
CREATE TRIGGER nodes_log_update AFTER UPDATE ON nodes
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name
                       OR OLD.resource_class IS DISTINCT FROM NEW.resource_class
                       OR OLD.provision_state IS DISTINCT FROM NEW.provision_state
                       OR OLD.power_state IS DISTINCT FROM NEW.power_state
                       OR OLD.maintenance IS DISTINCT FROM NEW.maintenance
                       OR OLD.properties IS DISTINCT FROM NEW.properties)
    EXECUTE FUNCTION placement_log_node();
CREATE TRIGGER node_traits_log_insert AFTER INSERT ON node_traits REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION placement_log_node_rows();
CREATE TRIGGER node_traits_log_update AFTER UPDATE ON node_traits REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION placement_log_node_rows();
CREATE TRIGGER node_traits_log_delete AFTER DELETE ON node_traits REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION placement_log_node_rows();

-- 2. A deleted allocation's capacity is free in Placement when its DELETE
--    commits. The placement backend logs every claim it makes
--    (placement_claims, consumer = the allocation's uuid); when the
--    consumer is in this database's metalloc-placement (mode local, or
--    mode http against metalloc-placement on this database), the one
--    deallocation removes it as DELETE /allocations/{consumer} does (the
--    providers it allocated from are bumped a generation, the consumer
--    goes with its allocations) and drops the claim's row, in the
--    deallocating transaction. A consumer not found here was claimed in
--    another Placement: its row stays for the resource tracker, which
--    releases it through the API.

-- +goose StatementBegin
-- Releases consumer p_consumer's allocations in this database's
-- metalloc-placement and the claim log's row; false (nothing done) when
-- the consumer is not here. Locks the consumer, then its providers.
CREATE FUNCTION metalloc_placement_release(p_consumer uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_deallocate(p_allocation_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    g bigint;
    u uuid;
BEGIN
    UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL, updated_at = now()
     WHERE allocation_id = p_allocation_id;
    DELETE FROM allocations WHERE id = p_allocation_id RETURNING group_id, uuid INTO g, u;
    IF g IS NOT NULL THEN
        UPDATE allocation_groups SET count = count - 1, updated_at = now() WHERE id = g AND count > 1;
        IF NOT FOUND THEN
            DELETE FROM allocation_groups
             WHERE id = g AND NOT EXISTS (SELECT 1 FROM allocations a WHERE a.group_id = g);
        END IF;
    END IF;
    IF u IS NOT NULL AND EXISTS (SELECT 1 FROM placement_claims c WHERE c.consumer_uuid = u) THEN
        PERFORM metalloc_placement_release(u);
    END IF;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_deallocate(p_allocation_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    g bigint;
BEGIN
    UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL, updated_at = now()
     WHERE allocation_id = p_allocation_id;
    DELETE FROM allocations WHERE id = p_allocation_id RETURNING group_id INTO g;
    IF g IS NOT NULL THEN
        UPDATE allocation_groups SET count = count - 1, updated_at = now() WHERE id = g AND count > 1;
        IF NOT FOUND THEN
            DELETE FROM allocation_groups
             WHERE id = g AND NOT EXISTS (SELECT 1 FROM allocations a WHERE a.group_id = g);
        END IF;
    END IF;
END;
$$;
-- +goose StatementEnd
DROP FUNCTION metalloc_placement_release(uuid);
DROP TRIGGER node_traits_log_delete ON node_traits;
DROP TRIGGER node_traits_log_update ON node_traits;
DROP TRIGGER node_traits_log_insert ON node_traits;
DROP TRIGGER nodes_log_update ON nodes;
DROP TRIGGER nodes_log_delete ON nodes;
DROP TRIGGER nodes_log_insert ON nodes;
CREATE TRIGGER nodes_notify AFTER INSERT OR DELETE ON nodes
    FOR EACH STATEMENT EXECUTE FUNCTION nodes_notify();
CREATE TRIGGER nodes_notify_update AFTER UPDATE ON nodes
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name
                       OR OLD.resource_class IS DISTINCT FROM NEW.resource_class
                       OR OLD.provision_state IS DISTINCT FROM NEW.provision_state
                       OR OLD.power_state IS DISTINCT FROM NEW.power_state
                       OR OLD.maintenance IS DISTINCT FROM NEW.maintenance
                       OR OLD.properties IS DISTINCT FROM NEW.properties)
    EXECUTE FUNCTION nodes_notify();
CREATE TRIGGER node_traits_notify AFTER INSERT OR UPDATE OR DELETE ON node_traits
    FOR EACH STATEMENT EXECUTE FUNCTION nodes_notify();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION nodes_notify_instance() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM placement_trackers)
       AND NOT (NEW.instance_uuid IS NOT NULL
                AND EXISTS (SELECT 1 FROM placement_claims c
                             WHERE c.consumer_uuid = NEW.instance_uuid AND c.provider_uuid = NEW.uuid)) THEN
        PERFORM pg_notify('metalloc_nodes', '');
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP VIEW tracker_nodes;
DROP FUNCTION placement_log_node();
DROP FUNCTION placement_log_node_rows();
DROP TABLE placement_node_changes;
