// Package allocation implements Ironic-compatible allocations
// (/v1/allocations, GET /v1/nodes/{ident}/allocation) on PostgreSQL, and the
// two reservation backends a conductor drives: the database backend
// (Allocator: ClaimReserve, the fast path, and Process, the slow path) and
// the placement backend (PlacementAllocator). The protocol they follow (claim,
// compare-and-set writes, takeover, lock order) is described in package
// conductor's documentation (conductor/doc.go); the SQL functions they call
// are in db/schema.sql.
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
