// Package port is metalloc's Ironic ports and port groups: a node's network
// interfaces (Port, unique by MAC address) and their bonds (Portgroup),
// their PostgreSQL storage (Store), the HTTP handlers of Ironic's
// /v1/ports and /v1/portgroups API and the node sub-collections, compatible
// with Ironic 21.4 so that `openstack baremetal port ...`, `port group ...`,
// `baremetal create` and gophercloud's baremetal/v1/ports work unchanged,
// and the Importer that `metalloc-manage node import` uses for a node's
// ports.
//
// # Storage
//
// Ports live in the ports table, port groups in portgroups (migration
// 00006). Both reference their node with ON DELETE CASCADE, so the
// statement that deletes a node (node.Store.Delete, after Ironic's checks)
// deletes its ports and port groups in the same transaction. A port's
// (portgroup_id, node_id) references its port group's (id, node_id): a port
// can only be a member of a group of its own node. MAC addresses are
// stored lower case (the API normalises them, as Ironic does) and are
// unique per table.
//
// Queries are in query.sql, compiled by sqlc into query.sql.go; the list
// queries are built in list.go (filters and keyset pagination on (sort key,
// id), as node/list.go). Every change runs in one transaction that takes
// the row lock of the node the port or group belongs to (and of the node
// it moves to) before touching it, as Ironic's conductor holds the node's
// lock for port changes; conductors reserving nodes skip locked rows.
//
// # API
//
// Handler follows Ironic's controllers (api/controllers/v1/port.py,
// portgroup.py, utils.py) and the conductor's port rules for status codes,
// messages and microversion gates: port groups from 1.23 and their
// sub-collections from 1.24; pxe_enabled and local_link_connection 1.19,
// physical_network 1.34, is_smartnic 1.53, port group mode and properties
// 1.26, detail 1.43 — fields newer than the request are hidden, and
// setting or asking for them is 406. Bodies are validated against
// schema/*.json (Ironic's PORT_SCHEMA, PORTGROUP_SCHEMA and
// LOCAL_LINK_CONN_SCHEMA) with node's python-jsonschema wording; PATCH
// applies RFC 6902 patches through node.ApplyPatch. Access follows
// Ironic's baremetal:port:* and baremetal:portgroup:* rules checked on the
// node: a caller who may not see the node gets 404 for its ports, lists are
// scoped to the project's owned or leased nodes (node.ListScope).
//
// # Not implemented
//
// metalloc attaches no VIFs and talks to no network service, so Ironic's
// checks on attached VIFs and DHCP/neutron updates on MAC changes are
// absent; the port name field (Ironic 1.88) is after the 21.4 reference.
// The conductor's port group rule that members share one physical network
// is kept (Tx.CreatePort, Tx.UpdatePort).
package port
