// Package allocgroup is gang allocation (issue 15, a metalloc extension):
// an allocation group asks for Count nodes of one resource class all or
// nothing, optionally inside one topology domain (package topology): the
// rule required (every member in one domain of the level), preferred (one
// domain if any has room, else as few as possible) or none.
//
// The group is a row of allocation_groups; its members are ordinary
// allocation rows (allocations.group_id) that exist only once reserved:
// the transaction that locks their nodes (FOR UPDATE SKIP LOCKED, never
// waiting) inserts them already active, holding their nodes, and activates
// the group, guarded by conductor_affinity = me AND state = 'allocating'
// (conductor/backend.GroupReserver.Process). A group in error has no member. Conductors claim,
// take over and release groups as they do allocations (conductor/doc.go).
//
// States: allocating -> active | error; active -> allocating when grown
// (PATCH count up), and back to active with the new members, or with
// count = its members and a last_error when the grow failed. Releasing a
// member (DELETE /v1/allocations/{member}, node delete, tear down) lowers
// the count (metalloc_deallocate); releasing the last one deletes the
// group.
//
// With the placement backend (conductor/backend.GroupReserver.Placement) the candidates are the
// free nodes Placement also offers (one GET /allocation_candidates), and
// every member is claimed in Placement at once: in-process in the
// reservation's transaction, or over HTTP with one POST /allocations just
// before it, undone when it does not commit; the members' claims are
// logged in placement_claims, so the resource tracker removes their
// Placement allocations once they are released.
package allocgroup
