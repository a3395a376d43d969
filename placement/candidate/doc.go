// Package candidate answers Placement's GET /allocation_candidates: which
// sets of resource providers could satisfy a request of resource classes,
// traits, aggregates and trees, with Placement's rules
// (objects/allocation_candidate.py, research_context.py).
//
// It is three stages around one pure function:
//
//   - load.go reads the provider trees in play from the placement schema
//     into a world: providers, inventories, traits, aggregates, with the
//     usage kept apart (per request, by inventory index). The static rows
//     of the whole world are cached per process (cache.go) and read again
//     only when placement.world_version, bumped at commit by every
//     transaction changing them, differs; the version and the usage are
//     read in the request's snapshot, in the same round trip as the
//     classes and traits, so a cached answer is exact. Unlimited requests
//     and any request on up to 20,000 providers search the cached world;
//     limited (or member_of) requests on larger worlds read batches of
//     root providers that SQL finds able to hold the requested amounts,
//     plus the trees of sharing providers (on flat providers, a walk of
//     the requested class's inventories in provider order: flatRootsSQL);
//   - search.go matches the request groups against the world and combines
//     them (cSearch.search): no database, no HTTP, tested on worlds built
//     from rows. It stops at the limit (cSearch.cap): group combinations
//     are walked depth first, isolate conflicts cut where they start, so a
//     limited request on wide trees costs its limit, not the product of
//     its groups (Placement bug 2070257);
//   - render.go writes Placement's JSON answer (allocation requests and
//     provider summaries) at the request's microversion.
//
// Finder.Find drives them for one Request, which package placement parses
// from the query string.
package candidate
