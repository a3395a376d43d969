-- +goose Up
-- Kind: expand. A trigger created again with a narrower column list.
-- nodes_log_update (00027) logs a node for the resource tracker when a
-- column it mirrors changes. It fired on every UPDATE of nodes and let its
-- WHEN clause decide, and PostgreSQL prepares a trigger's WHEN clause
-- again for every statement that fires it: the reservation's and the
-- release's updates of a node (instance_uuid, allocation_id,
-- instance_info), which change none of those columns, paid for it once
-- per allocation each (issue 29: work per allocation). Limited to the
-- columns it compares (UPDATE OF), it is not considered for them. No
-- BEFORE trigger on nodes changes a column, so every change of those
-- columns is still one of an UPDATE that sets them.
DROP TRIGGER nodes_log_update ON nodes;
CREATE TRIGGER nodes_log_update
    AFTER UPDATE OF name, resource_class, provision_state, power_state, maintenance, properties ON nodes
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name
                       OR OLD.resource_class IS DISTINCT FROM NEW.resource_class
                       OR OLD.provision_state IS DISTINCT FROM NEW.provision_state
                       OR OLD.power_state IS DISTINCT FROM NEW.power_state
                       OR OLD.maintenance IS DISTINCT FROM NEW.maintenance
                       OR OLD.properties IS DISTINCT FROM NEW.properties)
    EXECUTE FUNCTION placement_log_node();

-- +goose Down
DROP TRIGGER nodes_log_update ON nodes;
CREATE TRIGGER nodes_log_update AFTER UPDATE ON nodes
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name
                       OR OLD.resource_class IS DISTINCT FROM NEW.resource_class
                       OR OLD.provision_state IS DISTINCT FROM NEW.provision_state
                       OR OLD.power_state IS DISTINCT FROM NEW.power_state
                       OR OLD.maintenance IS DISTINCT FROM NEW.maintenance
                       OR OLD.properties IS DISTINCT FROM NEW.properties)
    EXECUTE FUNCTION placement_log_node();
