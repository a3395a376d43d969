// Package allocation implements Ironic-compatible allocations
// (/v1/allocations, GET /v1/nodes/{ident}/allocation) on PostgreSQL, and the
// database-backend reservation that conductors run for each allocation.
//
// # Life of an allocation
//
// The API inserts a row in state "allocating" with no owner
// (conductor_affinity NULL); a trigger NOTIFYs the conductors. A conductor
// claims a batch of such rows with FOR UPDATE SKIP LOCKED and, in the same
// transaction, picks for each a free node matching the request at random (a
// node whose name equals the allocation's name first), locks it without
// waiting for nodes others hold, activates the allocation and marks the node
// as holding it (ClaimReserve). Rows with no node free at that moment are
// only claimed and go through Process, one reservation transaction per
// attempt. Every conductor write to an
// allocation is a compare-and-set on conductor_affinity = me and
// state = 'allocating': a conductor that lost the row (taken over, deleted)
// changes nothing. When nothing fits, the row goes to "error" with a
// last_error that says how many nodes each filter left.
//
// Backfill (POST with "node", Ironic 1.58) records an already-deployed node as
// holding a new allocation synchronously in the API, in one transaction; a
// mismatch is a 400 and leaves nothing behind (Ironic answers 500 and keeps an
// error row).
//
// Deallocation (DELETE, node teardown, deleting a node in maintenance, removing
// a node's instance_uuid) clears the node and deletes the row in one
// transaction. The schema enforces the invariants: a node holds at most one
// allocation and one instance, an allocation at most one node, both sides name
// each other, and states only move allocating -> active | error.
package allocation
