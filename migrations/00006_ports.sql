-- +goose Up
-- Kind: expand. New tables only.
-- Ironic's ports (a node's network interfaces, by MAC address) and port
-- groups (bonds of a node's ports). Both belong to one node and go with it:
-- deleting a node deletes its port groups and ports in the same statement.
CREATE TABLE portgroups (
    id                         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid                       uuid        NOT NULL UNIQUE,
    name                       text        UNIQUE,
    node_id                    bigint      NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    -- A MAC address, lower case (the API normalises it, as Ironic does).
    address                    text        UNIQUE CHECK (address = lower(address)),
    mode                       text,
    properties                 jsonb       NOT NULL DEFAULT '{}',
    standalone_ports_supported boolean     NOT NULL DEFAULT true,
    extra                      jsonb       NOT NULL DEFAULT '{}',
    internal_info              jsonb       NOT NULL DEFAULT '{}',
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz,
    -- The target of ports' (portgroup_id, node_id) reference: a port joins
    -- only a port group of its own node.
    UNIQUE (id, node_id)
);
CREATE INDEX portgroups_node_idx ON portgroups (node_id, id);

CREATE TABLE ports (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid                  uuid        NOT NULL UNIQUE,
    -- A MAC address, lower case (the API normalises it, as Ironic does).
    address               text        NOT NULL UNIQUE CHECK (address = lower(address)),
    node_id               bigint      NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    portgroup_id          bigint,
    pxe_enabled           boolean     NOT NULL DEFAULT true,
    local_link_connection jsonb       NOT NULL DEFAULT '{}',
    physical_network      text,
    is_smartnic           boolean     NOT NULL DEFAULT false,
    extra                 jsonb       NOT NULL DEFAULT '{}',
    internal_info         jsonb       NOT NULL DEFAULT '{}',
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz,
    -- NO ACTION (checked at the end of the statement): deleting a node
    -- removes its ports and port groups together; deleting a port group
    -- that still has ports fails (the API refuses it first, as Ironic).
    FOREIGN KEY (portgroup_id, node_id) REFERENCES portgroups (id, node_id)
);
CREATE INDEX ports_node_idx ON ports (node_id, id);
CREATE INDEX ports_portgroup_idx ON ports (portgroup_id, id) WHERE portgroup_id IS NOT NULL;

-- +goose Down
DROP TABLE ports;
DROP TABLE portgroups;
