-- +goose Up
-- Kind: expand. A new table and a nullable column.
-- Ironic's chassis (package chassis), as records: a node may name one
-- (nodes.chassis_id). A chassis that nodes name cannot be deleted (the
-- foreign key is NO ACTION: a node written while its chassis goes fails
-- one or the other).
CREATE TABLE chassis (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid        uuid        NOT NULL UNIQUE,
    description text,
    extra       jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz
);

ALTER TABLE nodes ADD COLUMN chassis_id bigint REFERENCES chassis (id);
CREATE INDEX nodes_chassis_idx ON nodes (chassis_id, id) WHERE chassis_id IS NOT NULL;

-- +goose Down
DROP INDEX nodes_chassis_idx;
ALTER TABLE nodes DROP COLUMN chassis_id;
DROP TABLE chassis;
