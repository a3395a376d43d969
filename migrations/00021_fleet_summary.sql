-- +goose Up
-- Kind: expand. New functions and indexes only.
-- The operator page's fleet summary (GET /v1/ui/fleet) at 1,000,000 nodes:
-- counted per rack in the database instead of sent node by node, and one
-- rack's or row's nodes read without a scan of every node.

-- +goose StatementBegin
-- The operator page's category of a node, an index into node.Fleet.States:
-- 0 available, 1 allocated (holds an allocation or an instance, or is
-- active, deploying or waiting for a call-back), 2 maintenance (an
-- operator's flag wins), 3 manageable (enroll, manageable and the states
-- between: cleaning, inspecting...), 4 error (error and the "... failed"
-- states). The one definition: the summary's counts and its nodes both
-- use it.
CREATE FUNCTION metalloc_node_category(provision_state text, maintenance boolean,
                                       allocation_id bigint, instance_uuid uuid)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN maintenance THEN 2
    WHEN provision_state = 'error' OR provision_state LIKE '%failed' THEN 4
    WHEN allocation_id IS NOT NULL OR instance_uuid IS NOT NULL
      OR provision_state IN ('active', 'deploying', 'wait call-back') THEN 1
    WHEN provision_state = 'available' THEN 0
    ELSE 3
END;
-- +goose StatementEnd

-- One row's or rack's nodes, in id order (the page zoomed into it). The
-- allocation path never changes extra, so its updates stay HOT.
CREATE INDEX nodes_topology_idx ON nodes ((coalesce(extra->>'row', '')), (coalesce(extra->>'rack', '')), id);

-- The owners for the page's filter, one probe each (a skip scan), and a
-- node list by owner without a scan of every node.
CREATE INDEX nodes_owner_idx ON nodes (owner) WHERE owner IS NOT NULL;

-- +goose Down
DROP INDEX nodes_owner_idx;
DROP INDEX nodes_topology_idx;
DROP FUNCTION metalloc_node_category(text, boolean, bigint, uuid);
