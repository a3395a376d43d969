-- +goose Up
-- Kind: expand. New tables, functions and triggers only.
-- The Placement backend (allocation_backend: placement). These tables are
-- the conductor's side of the mirror; the Placement service (metalloc's own
-- or OpenStack's) keeps its own data in its own database.

-- What the resource tracker last wrote to Placement for each node: a
-- fingerprint of the provider's desired state (name, class, traits,
-- reserved, generic resources, configured ratios, endpoint). A node whose
-- fingerprint is unchanged is not written again. Rows of deleted nodes stay
-- until their provider is deleted in Placement.
CREATE TABLE placement_synced (
    node_uuid     uuid        PRIMARY KEY,
    fingerprint   text        NOT NULL,
    synced_at     timestamptz NOT NULL DEFAULT now()
);

-- Claims the conductor made, or is about to make, in Placement: one row per
-- consumer (= allocation uuid), written before PUT /allocations/{consumer}
-- and removed after DELETE /allocations/{consumer}. The tracker deletes the
-- Placement allocations of rows whose allocation is not (or no longer)
-- allocating or active on that provider's node: a conductor that died
-- between the two writes, a failed reservation, a deallocation or a node
-- teardown. Nothing leaks on either side.
CREATE TABLE placement_claims (
    consumer_uuid uuid        PRIMARY KEY,
    provider_uuid uuid        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Running resource trackers: each registers when it starts, refreshes its
-- row every pass and deletes it when it stops; rows of trackers that died
-- are expired by the others after 10 minutes.
CREATE TABLE placement_trackers (
    id           uuid        PRIMARY KEY,
    hostname     text        NOT NULL,
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- +goose StatementBegin
-- Wakes resource trackers (LISTEN metalloc_nodes) when nodes, their traits
-- or allocations change, only while some tracker runs (placement_trackers
-- has a row): with the database backend nobody listens. PostgreSQL folds
-- duplicates within a transaction and delivers at commit, but a notifying
-- commit takes a database-wide lock until it is flushed, so notifications
-- are kept off the reservation path (see nodes_notify_instance).
CREATE FUNCTION nodes_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM placement_trackers) THEN
        PERFORM pg_notify('metalloc_nodes', '');
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Row-level, for a node's instance_uuid changing. A node taking the
-- instance whose claim the placement backend logged for it
-- (placement_claims) does not notify: that claim already uses the node in
-- Placement, and the tracker leaves such a node's provider as it is.
CREATE FUNCTION nodes_notify_instance() RETURNS trigger
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
CREATE TRIGGER nodes_notify AFTER INSERT OR DELETE ON nodes
    FOR EACH STATEMENT EXECUTE FUNCTION nodes_notify();
-- The columns the tracker mirrors, instance_uuid apart.
CREATE TRIGGER nodes_notify_update AFTER UPDATE ON nodes
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name
                       OR OLD.resource_class IS DISTINCT FROM NEW.resource_class
                       OR OLD.provision_state IS DISTINCT FROM NEW.provision_state
                       OR OLD.power_state IS DISTINCT FROM NEW.power_state
                       OR OLD.maintenance IS DISTINCT FROM NEW.maintenance
                       OR OLD.properties IS DISTINCT FROM NEW.properties)
    EXECUTE FUNCTION nodes_notify();
CREATE TRIGGER nodes_notify_instance AFTER UPDATE OF instance_uuid ON nodes
    FOR EACH ROW WHEN (OLD.instance_uuid IS DISTINCT FROM NEW.instance_uuid)
    EXECUTE FUNCTION nodes_notify_instance();
CREATE TRIGGER node_traits_notify AFTER INSERT OR UPDATE OR DELETE ON node_traits
    FOR EACH STATEMENT EXECUTE FUNCTION nodes_notify();
CREATE TRIGGER allocations_nodes_notify AFTER DELETE ON allocations
    FOR EACH STATEMENT EXECUTE FUNCTION nodes_notify();

-- +goose Down
DROP TRIGGER allocations_nodes_notify ON allocations;
DROP TRIGGER node_traits_notify ON node_traits;
DROP TRIGGER nodes_notify_instance ON nodes;
DROP TRIGGER nodes_notify_update ON nodes;
DROP TRIGGER nodes_notify ON nodes;
DROP FUNCTION nodes_notify_instance();
DROP FUNCTION nodes_notify();
DROP TABLE placement_trackers;
DROP TABLE placement_claims;
DROP TABLE placement_synced;
