// Package backend is the part of the conductor engine that gets nodes for
// the rows a conductor owns: the reservation backends and what they share.
// Package conductor drives it (claim loop, takeover, release); nothing in
// metalloc-api links it (TestAPIDoesNotLinkTheEngine in cmd/api).
//
// Files, in the order one allocation meets them:
//
//   - backend.go: the contract (Backend, GroupBackend, Claimed,
//     ClaimedGroup, Outcome, ErrClaimedUnread), the claim without
//     reservation both backends fall back to (claimOnly) and the read of
//     claimed rows (Read, the view allocation_requests);
//   - database.go: the database backend (Database): the fast path
//     ClaimReserve (metalloc_claim_reserve: claim and reserve in one
//     statement) and the slow path Process (metalloc_reserve, one short
//     transaction per attempt), the failure with a last_error a person can
//     act on (markFailed, noFit: Ironic's sentences and the count each
//     filter left);
//   - wait.go: a row's wait while every node that fits it is locked (Wait:
//     Process answers Waiting, the conductor calls again when it is due),
//     one attempt at a time for the rows of one kind (lockedKinds), shared
//     by both backends;
//   - placement.go, placement_local.go, placement_group.go: the placement
//     backend (Placement) in both modes: over HTTP (selections from the
//     scheduler, PUT /allocations, then metalloc_reserve) and local
//     (metalloc-placement on this database: the fast path
//     metalloc_claim_reserve_placement, the batch localRound, claimLocal),
//     and what it offers groups (GroupOffers, ClaimGroup);
//   - group.go, group_cache.go: allocation groups (GroupReserver: plans from
//     package topology, every member reserved in one transaction or none,
//     with the workers' shared read of the free candidates).
//
// The SQL these run is query.sql here: the statements that move a row the
// conductor owns (claim, reserve, fail, the Placement claim log, the group
// reservation). The table's own operations stay with the packages that own
// the tables (allocation, allocgroup: inserts, reads for the API, deletes).
// The protocol (claim in one statement, compare-and-set guard, lock order)
// is described in package conductor's documentation (conductor/doc.go).
package backend
