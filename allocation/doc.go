// Package allocation implements Ironic-compatible allocations
// (/v1/allocations, GET /v1/nodes/{ident}/allocation) on PostgreSQL: the
// model, the store, the HTTP handlers and the event hub (Prefer: wait,
// GET /v1/allocations/events). The conductor side (claim, reserve through
// a backend, fail, take over) is package conductor and its reservation
// backends conductor/backend; the protocol (claim, compare-and-set writes,
// takeover, lock order) is described in conductor/doc.go, and the SQL
// functions are in db/schema.sql.
//
// The API inserts a row in state "allocating" with no owner; a trigger
// NOTIFYs the conductors. When nothing fits, the row goes to "error" with a
// last_error that says how many nodes each filter left (FitStats, over the
// same predicates the pick uses).
//
// Backfill (POST with "node", Ironic 1.58) records an already-deployed node as
// holding a new allocation synchronously in the API, in one transaction; a
// mismatch is a 400 and leaves nothing behind (Ironic answers 500 and keeps an
// error row).
//
// Deallocation (DELETE, node teardown, deleting a node in maintenance, removing
// a node's instance_uuid) is one SQL function, metalloc_deallocate, called in
// the transaction that locked the node first. The schema enforces the
// invariants: a node holds at most one allocation and one instance, an
// allocation at most one node, both sides name each other, and states only
// move allocating -> active | error.
package allocation
