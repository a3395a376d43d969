-- +goose Up
-- Kind: expand. A new table only.
-- Node history (package node): the events Ironic records for a node
-- (failures, with severity ERROR, and a few notices), oldest first; they
-- go with the node.
CREATE TABLE node_history (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid       uuid        NOT NULL UNIQUE,
    node_id    bigint      NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    conductor  text,
    event      text        NOT NULL,
    event_type text,
    severity   text,
    user_id    text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX node_history_node_idx ON node_history (node_id, id);

-- +goose Down
DROP TABLE node_history;
