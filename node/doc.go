// Package node is metalloc's bare-metal node resource: the domain model
// (Node), its PostgreSQL storage (Store), the provision and power state
// machine, and the HTTP handlers of OpenStack Ironic's node API
// (/v1/nodes...), compatible with Ironic 21.4 up to microversion 1.82 so
// that `openstack baremetal node ...`, openstacksdk and gophercloud work
// unchanged. It also imports node files (Import, behind
// `metalloc-manage node import`).
//
// # Storage
//
// Nodes live in the nodes table, their traits in node_traits. Queries are in
// query.sql, compiled by sqlc into query.sql.go (the nodes row type is
// NodeRow); every read of a node joins the allocation it holds (for
// allocation_uuid) and aggregates its traits, so one statement returns what
// the API shows. The one query built in Go is the list query (list.go): its
// filters, sort key and keyset predicate vary per request; it splices in
// only whitelisted column expressions (SortKeys) and passes every value as a
// bind parameter. Pagination is keyset on (sort key, id), never OFFSET, so a
// page costs the same wherever it is and concurrent inserts do not shift it.
//
// A node's ports and port groups (package port) reference it with ON DELETE
// CASCADE: the statement of Store.Delete that removes the node removes them
// in the same transaction, after Ironic's delete checks passed.
//
// Every change runs in one transaction that first takes the node's row lock
// (SELECT ... FOR UPDATE). Conductors reserving nodes for allocations use
// FOR UPDATE SKIP LOCKED, so they pass over a node being changed rather than
// wait for it, and a change never overwrites a reservation it did not see.
// Changes that drop a node's allocation (tear down, deleting a node in
// maintenance, removing instance_uuid) call an AllocationRemover inside that
// same transaction, after locking the node (lock order: node, then
// allocation; conductor/doc.go). Deallocator, the default, is the one
// deallocation: the SQL function metalloc_deallocate.
//
// # State machine
//
// metalloc drives no hardware. A Driver (FakeDriver by default, modelled on
// Ironic's fake-hardware type) performs power and provisioning steps that
// complete at once, so every API transition lands in its stable state in
// the request that asked for it: enroll -manage-> manageable -provide->
// available -active-> active -deleted-> available, plus inspect, clean,
// adopt, rescue/unrescue, rebuild, abort and the recovery transitions out of
// the failure states, all with Ironic's rules and messages (Provision). As in
// Ironic, a driver failure is not a request failure: it leaves the node in
// the matching failure state with last_error set.
//
// # API
//
// Handler registers the routes on the /v1 group (which negotiates the
// microversion). It follows Ironic's controllers (api/controllers/v1/node.py
// and utils.py) for status codes, messages and microversion gates:
//
//   - fields introduced after the request's microversion are hidden, and
//     asking for them (fields=, sort_key=, filters, create or patch values)
//     is 406;
//   - POST bodies are validated against schema/node.json (Ironic's node
//     schema) with github.com/santhosh-tekuri/jsonschema/v6, and errors are
//     worded as python-jsonschema words them ("Schema error for node: ...");
//   - PATCH applies an RFC 6902 patch (github.com/evanphx/json-patch/v5) to
//     the node's patchable fields, refuses read-only fields with Ironic's
//     "Cannot patch ..." 400, then applies the conductor's update rules
//     (Store.Update);
//   - unknown query parameters and body keys are 400 "Unexpected
//     arguments", as Ironic's argument validation does;
//   - driver_info and instance_info secrets are masked as for a caller
//     without Ironic's show_password policy.
//   - a path identifier that is neither a uuid nor a valid logical name is
//     400 "Expected UUID or name for node: <ident>" (Ironic's node _lookup),
//     "... for node_ident: ..." under /states, /maintenance, /management
//     and /vendor_passthru (identArg);
//   - the routes of a node's hardware interfaces (package driver's
//     registry: fake-hardware, ipmi) answer as those interfaces do in
//     Ironic: validate (hardware.go), target RAID configurations (fake and
//     agent RAID, checked against Ironic's RAID schema), boot devices and
//     indicators (fake management), vendor methods (fake vendor), VIFs
//     (noop records nothing, flat records them on ports and port groups:
//     vif.go) and the node's history (history.go); interfaces without the
//     feature (no-raid, no-console, a BMC-bound ipmitool management, BIOS,
//     inventory: driverRoutes) answer "Driver <driver> does not support
//     <interface or method> (disabled or not implemented)."
//     (UnsupportedDriverExtension), or an empty read where Ironic reads
//     data only such an interface produces; GET /nodes/{ident}/{segment} is
//     the show with fields=<segment>, as Ironic routes it;
//   - POST and driver, interface or conductor group changes are checked by
//     the Driver (FakeDriver): interfaces against the registry, and, in
//     metalloc-api, that a live conductor of the node's group serves the
//     driver (Ironic's 400 "No valid host was found. ...").
//
// Errors of this package are ErrNotFound (wrapped) for a missing node and
// *Error, whose Kind the handler maps to a status in one place (apiError).
//
// # Not stored
//
// Ironic node fields metalloc has no column for are shown as Ironic shows
// them unset: clean_step, deploy_step, inspection_started_at,
// inspection_finished_at, boot_mode and secure_boot. Creating a node with
// boot_mode or secure_boot is 400. A node's chassis (chassis_uuid) is a
// chassis of package chassis (nodes.chassis_id); one that does not exist is
// 400 "Chassis ... could not be found.".
package node
