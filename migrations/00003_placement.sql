-- +goose Up
-- Kind: expand. A new schema (placement) and its tables only.
-- metalloc-placement's own schema: resource providers, their inventories,
-- traits and aggregates, consumers and their allocations, as OpenStack
-- Placement 8.0 models them (../shared/spec/placement-generic-resource-pools.md,
-- placement-aggregate-generation.md). Nothing in the Ironic side refers to it.
CREATE SCHEMA placement;

-- Standard classes keep the ids os-resource-classes gives them (their order
-- in its list); CUSTOM_ classes get ids from 10000 up, as in Placement.
CREATE TABLE placement.resource_classes (
    id         integer     PRIMARY KEY,
    name       text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz
);
CREATE SEQUENCE placement.custom_resource_class_id START 10000;
INSERT INTO placement.resource_classes (id, name)
SELECT ord - 1, name
  FROM unnest(ARRAY['VCPU', 'MEMORY_MB', 'DISK_GB', 'PCI_DEVICE', 'SRIOV_NET_VF',
                    'NUMA_SOCKET', 'NUMA_CORE', 'NUMA_THREAD', 'NUMA_MEMORY_MB',
                    'IPV4_ADDRESS', 'VGPU', 'VGPU_DISPLAY_HEAD',
                    'NET_BW_EGR_KILOBIT_PER_SEC', 'NET_BW_IGR_KILOBIT_PER_SEC', 'PCPU',
                    'MEM_ENCRYPTION_CONTEXT', 'FPGA', 'PGPU',
                    'NET_PACKET_RATE_KILOPACKET_PER_SEC',
                    'NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC',
                    'NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC'])
       WITH ORDINALITY AS t(name, ord);

-- Standard traits (os-traits) are synced in by metalloc-placement at start;
-- CUSTOM_ traits are created through the API.
CREATE TABLE placement.traits (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz
);

-- generation increases with every change to the provider's inventory,
-- traits, aggregates or allocations: writers compare-and-set it.
-- root_provider_id is the provider itself for a root.
CREATE TABLE placement.resource_providers (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid               uuid        NOT NULL UNIQUE,
    name               text        NOT NULL UNIQUE,
    generation         integer     NOT NULL DEFAULT 0,
    parent_provider_id bigint      REFERENCES placement.resource_providers (id),
    root_provider_id   bigint      REFERENCES placement.resource_providers (id),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz
);
CREATE INDEX resource_providers_parent_idx ON placement.resource_providers (parent_provider_id);
CREATE INDEX resource_providers_root_idx ON placement.resource_providers (root_provider_id);

CREATE TABLE placement.inventories (
    resource_provider_id bigint           NOT NULL REFERENCES placement.resource_providers (id) ON DELETE CASCADE,
    resource_class_id    integer          NOT NULL REFERENCES placement.resource_classes (id),
    total                integer          NOT NULL,
    reserved             integer          NOT NULL DEFAULT 0,
    min_unit             integer          NOT NULL DEFAULT 1,
    max_unit             integer          NOT NULL,
    step_size            integer          NOT NULL DEFAULT 1,
    allocation_ratio     double precision NOT NULL DEFAULT 1.0,
    created_at           timestamptz      NOT NULL DEFAULT now(),
    updated_at           timestamptz,
    PRIMARY KEY (resource_provider_id, resource_class_id)
);
CREATE INDEX inventories_class_idx ON placement.inventories (resource_class_id);

CREATE TABLE placement.resource_provider_traits (
    resource_provider_id bigint NOT NULL REFERENCES placement.resource_providers (id) ON DELETE CASCADE,
    trait_id             bigint NOT NULL REFERENCES placement.traits (id),
    PRIMARY KEY (resource_provider_id, trait_id)
);
CREATE INDEX resource_provider_traits_trait_idx ON placement.resource_provider_traits (trait_id);

CREATE TABLE placement.resource_provider_aggregates (
    resource_provider_id bigint NOT NULL REFERENCES placement.resource_providers (id) ON DELETE CASCADE,
    aggregate_uuid       uuid   NOT NULL,
    PRIMARY KEY (resource_provider_id, aggregate_uuid)
);
CREATE INDEX resource_provider_aggregates_agg_idx ON placement.resource_provider_aggregates (aggregate_uuid);

-- A consumer (an instance, a migration, an Ironic allocation ...) and its
-- generation (1.28). A consumer exists while it has allocations.
CREATE TABLE placement.consumers (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid          uuid        NOT NULL UNIQUE,
    project_id    text        NOT NULL,
    user_id       text        NOT NULL,
    consumer_type text,
    generation    integer     NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz
);
CREATE INDEX consumers_project_user_idx ON placement.consumers (project_id, user_id);

CREATE TABLE placement.allocations (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource_provider_id bigint      NOT NULL REFERENCES placement.resource_providers (id),
    consumer_id          bigint      NOT NULL REFERENCES placement.consumers (id) ON DELETE CASCADE,
    resource_class_id    integer     NOT NULL REFERENCES placement.resource_classes (id),
    used                 bigint      NOT NULL CHECK (used > 0),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz,
    UNIQUE (consumer_id, resource_provider_id, resource_class_id)
);
CREATE INDEX allocations_provider_class_idx ON placement.allocations (resource_provider_id, resource_class_id);

-- +goose Down
DROP SCHEMA placement CASCADE;
