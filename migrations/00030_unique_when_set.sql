-- +goose Up
-- Kind: expand. Unique constraints become partial unique indexes of the same
-- names: the same rows are refused, with the same constraint names.
-- Less to write per node and per allocation (issue 29): the unique keys of
-- columns that are NULL most of the time index only the rows that have a
-- value. A btree unique constraint indexes every row, NULLs included, so
-- every imported node wrote an entry for its empty instance_uuid and
-- allocation_id, every release of a node two more, and every allocation
-- one for its (usually absent) name and one for its node_id while
-- allocating. Uniqueness is the same (NULLs never conflicted), the index
-- names stay the constraints' names (a violation names them as before),
-- and every lookup by value can use them (an equality implies NOT NULL).
ALTER TABLE nodes DROP CONSTRAINT nodes_instance_uuid_key;
CREATE UNIQUE INDEX nodes_instance_uuid_key ON nodes (instance_uuid) WHERE instance_uuid IS NOT NULL;
ALTER TABLE nodes DROP CONSTRAINT nodes_allocation_id_key;
CREATE UNIQUE INDEX nodes_allocation_id_key ON nodes (allocation_id) WHERE allocation_id IS NOT NULL;
ALTER TABLE allocations DROP CONSTRAINT allocations_name_key;
CREATE UNIQUE INDEX allocations_name_key ON allocations (name) WHERE name IS NOT NULL;
ALTER TABLE allocations DROP CONSTRAINT allocations_node_id_key;
CREATE UNIQUE INDEX allocations_node_id_key ON allocations (node_id) WHERE node_id IS NOT NULL;

-- +goose Down
DROP INDEX allocations_node_id_key;
ALTER TABLE allocations ADD CONSTRAINT allocations_node_id_key UNIQUE (node_id);
DROP INDEX allocations_name_key;
ALTER TABLE allocations ADD CONSTRAINT allocations_name_key UNIQUE (name);
DROP INDEX nodes_allocation_id_key;
ALTER TABLE nodes ADD CONSTRAINT nodes_allocation_id_key UNIQUE (allocation_id);
DROP INDEX nodes_instance_uuid_key;
ALTER TABLE nodes ADD CONSTRAINT nodes_instance_uuid_key UNIQUE (instance_uuid);
