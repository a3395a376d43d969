// Package candidate answers Placement's GET /allocation_candidates: which
// sets of resource providers could satisfy a request of resource classes,
// traits, aggregates and trees, with Placement's rules
// (objects/allocation_candidate.py, research_context.py).
//
// It is three stages around one pure function:
//
//   - load.go reads the provider trees in play from the placement schema
//     (all of them, or batches of root providers that SQL finds able to hold
//     the requested amounts, plus the trees of sharing providers) into a
//     world: providers, inventories with usage, traits, aggregates;
//   - search.go matches the request groups against the world and combines
//     them (cSearch.search): no database, no HTTP, tested on worlds built
//     from rows;
//   - render.go writes Placement's JSON answer (allocation requests and
//     provider summaries) at the request's microversion.
//
// Finder.Find drives them for one Request, which package placement parses
// from the query string.
package candidate
