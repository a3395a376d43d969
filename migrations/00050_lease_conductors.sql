-- +goose Up
-- Kind: expand. Same function signatures (metalloc_pick's body only), a new
-- helper function, a column appended to the free_nodes view, a nullable
-- column on leases and three more event kinds: binaries built for 00049
-- work on it unchanged (they stop taking reservable nodes on demand, and
-- neither start nor end leases).
-- On-demand allocations stay off reservable nodes (leases, issue 43): a
-- node in the pool leases take from (nodes.reservable) is taken by an
-- allocation only when the allocation's owner is the node's lessee, which
-- is how a lease with on_start: lessee hands its nodes to its project (its
-- own POST /v1/allocations land on them). Without an owner (an admin's
-- allocation) a reservable node is never taken: it may be booked. The test
-- is a filter on the node row the pick already reads (no index, no join),
-- so the plans are those of 00044 (TestClaimPlansIgnoreNodeStatistics).
-- The conductors' group plans and the Placement backend's filters read the
-- view's new column with the same function (conductor/backend, topology).

-- Leases started and ended by the conductors (conductor/leases.go): the
-- warning lease.ending is sent once, when this is still NULL.
ALTER TABLE leases ADD COLUMN ending_noticed_at timestamptz;
-- Their events share the allocation event log (GET /v1/allocations/events),
-- as groups' do: allocation_uuid holds the lease's uuid, owner its project,
-- resource_class its first reservation's.
ALTER TABLE allocation_events DROP CONSTRAINT allocation_events_kind_check;
ALTER TABLE allocation_events ADD CONSTRAINT allocation_events_kind_check
    CHECK (kind IN ('created', 'updated', 'deleted', 'group_created', 'group_updated', 'group_deleted',
                    'lease.start', 'lease.end', 'lease.ending'));

-- +goose StatementBegin
-- A node an on-demand allocation of p_owner may take as far as leases are
-- concerned: not reservable, or leased to p_owner.
CREATE FUNCTION metalloc_node_on_demand(node_reservable boolean, node_lessee text, p_owner text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN NOT node_reservable OR (p_owner IS NOT NULL AND node_lessee = p_owner);
-- +goose StatementEnd

-- The view of 00005 (its n.* as expanded then), with reservable appended.
CREATE OR REPLACE VIEW free_nodes AS
SELECT n.id, n.uuid, n.name, n.driver, n.resource_class, n.provision_state,
       n.target_provision_state, n.provision_updated_at, n.power_state,
       n.target_power_state, n.maintenance, n.maintenance_reason, n.fault,
       n.last_error, n.instance_uuid, n.allocation_id, n.owner, n.lessee,
       n.description, n.conductor_group, n.reservation, n.protected,
       n.protected_reason, n.retired, n.retired_reason, n.automated_clean,
       n.console_enabled, n.shard, n.properties, n.extra, n.instance_info,
       n.driver_info, n.driver_internal_info, n.interfaces, n.network_data,
       n.raid_config, n.target_raid_config, n.created_at, n.updated_at,
       ARRAY(SELECT t.trait FROM node_traits t WHERE t.node_id = n.id) AS traits,
       n.reservable
  FROM nodes n
 WHERE metalloc_node_free(n.provision_state, n.maintenance, n.power_state, n.instance_uuid, n.allocation_id);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_pick(p_resource_class text, p_traits text[], p_candidates uuid[], p_owner text, p_name text, p_placement_class integer DEFAULT NULL::integer, p_start bigint DEFAULT NULL::bigint, p_exclude bigint[] DEFAULT NULL::bigint[], OUT node_id bigint, OUT node_uuid uuid, OUT provider_id bigint)
 RETURNS record
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_sort TO 'off'
 SET jit TO 'off'
 SET join_collapse_limit TO '1'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_material TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
DECLARE
    v_start bigint;
    v_lo bigint;
    v_hi bigint;
BEGIN
    -- The trait test reads only the node's traits asked for (not the view's
    -- traits, all of them): each index of node_traits then has a bound on
    -- its first column, so no plan of it reads the whole index, even one
    -- made while node_traits was empty.
    IF p_name IS NOT NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM free_nodes n
         WHERE n.name = p_name AND n.resource_class = p_resource_class
           AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, p_candidates, p_owner)
           AND metalloc_node_on_demand(n.reservable, n.lessee, p_owner)
           AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
           AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
           FOR UPDATE OF n SKIP LOCKED;
        IF node_id IS NOT NULL THEN
            RETURN;
        END IF;
    END IF;
    IF p_candidates IS NOT NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM unnest(p_candidates) c (uuid) JOIN free_nodes n ON n.uuid = c.uuid
         WHERE n.resource_class = p_resource_class
           AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
           AND metalloc_node_on_demand(n.reservable, n.lessee, p_owner)
           AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
           AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
         ORDER BY random()
         LIMIT 1
           FOR UPDATE OF n SKIP LOCKED;
        RETURN;
    END IF;
    v_start := p_start;
    IF v_start IS NULL THEN
        SELECT metalloc_pick_start(coalesce((SELECT n.id FROM nodes n ORDER BY n.id LIMIT 1), 0),
                                   coalesce((SELECT n.id FROM nodes n ORDER BY n.id DESC LIMIT 1), 0))
          INTO v_start;
    END IF;
    -- From the start to the end of the id range, then from its beginning.
    FOR pass IN 1..2 LOOP
        IF pass = 1 THEN
            v_lo := v_start; v_hi := 9223372036854775807;
        ELSE
            v_lo := -9223372036854775808; v_hi := v_start;
        END IF;
        IF p_placement_class IS NULL THEN
            SELECT n.id, n.uuid INTO node_id, node_uuid
              FROM free_nodes n
             WHERE n.resource_class = p_resource_class
               AND n.id >= v_lo AND n.id < v_hi
               AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
               AND metalloc_node_on_demand(n.reservable, n.lessee, p_owner)
               AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
               AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
             ORDER BY n.id
             LIMIT 1
               FOR UPDATE OF n SKIP LOCKED;
        ELSE
            -- A mirrored node only; the claim verifies the rest against
            -- Placement under its providers' lock.
            SELECT n.id, n.uuid, rp.id INTO node_id, node_uuid, provider_id
              FROM free_nodes n
              JOIN placement.resource_providers rp ON rp.uuid = n.uuid
             WHERE n.resource_class = p_resource_class
               AND n.id >= v_lo AND n.id < v_hi
               AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
               AND metalloc_node_on_demand(n.reservable, n.lessee, p_owner)
               AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
               AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
             ORDER BY n.id
             LIMIT 1
               FOR UPDATE OF n SKIP LOCKED;
        END IF;
        EXIT WHEN node_id IS NOT NULL;
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION metalloc_pick(p_resource_class text, p_traits text[], p_candidates uuid[], p_owner text, p_name text, p_placement_class integer DEFAULT NULL::integer, p_start bigint DEFAULT NULL::bigint, p_exclude bigint[] DEFAULT NULL::bigint[], OUT node_id bigint, OUT node_uuid uuid, OUT provider_id bigint)
 RETURNS record
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_sort TO 'off'
 SET jit TO 'off'
 SET join_collapse_limit TO '1'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_material TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
DECLARE
    v_start bigint;
    v_lo bigint;
    v_hi bigint;
BEGIN
    -- The trait test reads only the node's traits asked for (not the view's
    -- traits, all of them): each index of node_traits then has a bound on
    -- its first column, so no plan of it reads the whole index, even one
    -- made while node_traits was empty.
    IF p_name IS NOT NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM free_nodes n
         WHERE n.name = p_name AND n.resource_class = p_resource_class
           AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, p_candidates, p_owner)
           AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
           AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
           FOR UPDATE OF n SKIP LOCKED;
        IF node_id IS NOT NULL THEN
            RETURN;
        END IF;
    END IF;
    IF p_candidates IS NOT NULL THEN
        SELECT n.id, n.uuid INTO node_id, node_uuid
          FROM unnest(p_candidates) c (uuid) JOIN free_nodes n ON n.uuid = c.uuid
         WHERE n.resource_class = p_resource_class
           AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
           AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
           AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
         ORDER BY random()
         LIMIT 1
           FOR UPDATE OF n SKIP LOCKED;
        RETURN;
    END IF;
    v_start := p_start;
    IF v_start IS NULL THEN
        SELECT metalloc_pick_start(coalesce((SELECT n.id FROM nodes n ORDER BY n.id LIMIT 1), 0),
                                   coalesce((SELECT n.id FROM nodes n ORDER BY n.id DESC LIMIT 1), 0))
          INTO v_start;
    END IF;
    -- From the start to the end of the id range, then from its beginning.
    FOR pass IN 1..2 LOOP
        IF pass = 1 THEN
            v_lo := v_start; v_hi := 9223372036854775807;
        ELSE
            v_lo := -9223372036854775808; v_hi := v_start;
        END IF;
        IF p_placement_class IS NULL THEN
            SELECT n.id, n.uuid INTO node_id, node_uuid
              FROM free_nodes n
             WHERE n.resource_class = p_resource_class
               AND n.id >= v_lo AND n.id < v_hi
               AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
               AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
               AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
             ORDER BY n.id
             LIMIT 1
               FOR UPDATE OF n SKIP LOCKED;
        ELSE
            -- A mirrored node only; the claim verifies the rest against
            -- Placement under its providers' lock.
            SELECT n.id, n.uuid, rp.id INTO node_id, node_uuid, provider_id
              FROM free_nodes n
              JOIN placement.resource_providers rp ON rp.uuid = n.uuid
             WHERE n.resource_class = p_resource_class
               AND n.id >= v_lo AND n.id < v_hi
               AND metalloc_node_in_scope(n.uuid, n.owner, n.lessee, NULL, p_owner)
               AND metalloc_node_has_traits(ARRAY(SELECT t.trait FROM node_traits t
                                              WHERE t.node_id = n.id AND t.trait = ANY (p_traits)), p_traits)
               AND (p_exclude IS NULL OR n.id <> ALL (p_exclude))
             ORDER BY n.id
             LIMIT 1
               FOR UPDATE OF n SKIP LOCKED;
        END IF;
        EXIT WHEN node_id IS NOT NULL;
    END LOOP;
END;
$$;
-- +goose StatementEnd

DROP VIEW free_nodes;
CREATE VIEW free_nodes AS
SELECT n.id, n.uuid, n.name, n.driver, n.resource_class, n.provision_state,
       n.target_provision_state, n.provision_updated_at, n.power_state,
       n.target_power_state, n.maintenance, n.maintenance_reason, n.fault,
       n.last_error, n.instance_uuid, n.allocation_id, n.owner, n.lessee,
       n.description, n.conductor_group, n.reservation, n.protected,
       n.protected_reason, n.retired, n.retired_reason, n.automated_clean,
       n.console_enabled, n.shard, n.properties, n.extra, n.instance_info,
       n.driver_info, n.driver_internal_info, n.interfaces, n.network_data,
       n.raid_config, n.target_raid_config, n.created_at, n.updated_at,
       ARRAY(SELECT t.trait FROM node_traits t WHERE t.node_id = n.id) AS traits
  FROM nodes n
 WHERE metalloc_node_free(n.provision_state, n.maintenance, n.power_state, n.instance_uuid, n.allocation_id);
DROP FUNCTION metalloc_node_on_demand(boolean, text, text);
DELETE FROM allocation_events WHERE kind LIKE 'lease.%';
ALTER TABLE allocation_events DROP CONSTRAINT allocation_events_kind_check;
ALTER TABLE allocation_events ADD CONSTRAINT allocation_events_kind_check
    CHECK (kind IN ('created', 'updated', 'deleted', 'group_created', 'group_updated', 'group_deleted'));
ALTER TABLE leases DROP COLUMN ending_noticed_at;
