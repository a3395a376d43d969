-- +goose Up
-- Kind: expand. A foreign key dropped that no writer relies on (every writer
-- writes against an inventory of the class).
-- placement.allocations loses its foreign key to placement.resource_classes
-- (issue 29: the placement backend's bursts). Every writer of an
-- allocation takes a FOR KEY SHARE lock on its class's row for that key,
-- and with a few classes for a whole fleet the claims of concurrent
-- transactions share the same rows: each further locker makes PostgreSQL
-- create a new MultiXact holding every current locker (about 2,100 for a
-- burst of 3,000 allocations), which the burst paid for in CPU and SLRU
-- lookups. The key guarded nothing the inventories do not: an allocation
-- is written only against an inventory of its class (the Placement API's
-- checks, metalloc_claim_reserve_placement's join), an inventory with
-- allocations cannot be deleted (409 InventoryInUse), and
-- placement.inventories keeps its own key to the class, which a class
-- delete (409 while any inventory uses it) runs into. OpenStack
-- Placement's allocations table has no foreign keys either.
ALTER TABLE placement.allocations DROP CONSTRAINT allocations_resource_class_id_fkey;

-- +goose Down
ALTER TABLE placement.allocations ADD CONSTRAINT allocations_resource_class_id_fkey
    FOREIGN KEY (resource_class_id) REFERENCES placement.resource_classes(id);
