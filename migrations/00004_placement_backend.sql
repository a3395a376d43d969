-- +goose Up
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

-- +goose StatementBegin
-- Wakes resource trackers (LISTEN metalloc_nodes) when nodes, their traits
-- or allocations change. One notification per statement; PostgreSQL folds
-- duplicates within a transaction and delivers at commit.
CREATE FUNCTION nodes_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('metalloc_nodes', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER nodes_notify AFTER INSERT OR UPDATE OR DELETE ON nodes
    FOR EACH STATEMENT EXECUTE FUNCTION nodes_notify();
CREATE TRIGGER node_traits_notify AFTER INSERT OR UPDATE OR DELETE ON node_traits
    FOR EACH STATEMENT EXECUTE FUNCTION nodes_notify();
CREATE TRIGGER allocations_nodes_notify AFTER DELETE ON allocations
    FOR EACH STATEMENT EXECUTE FUNCTION nodes_notify();

-- +goose Down
DROP TRIGGER allocations_nodes_notify ON allocations;
DROP TRIGGER node_traits_notify ON node_traits;
DROP TRIGGER nodes_notify ON nodes;
DROP FUNCTION nodes_notify();
DROP TABLE placement_claims;
DROP TABLE placement_synced;
