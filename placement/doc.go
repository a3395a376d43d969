// Package placement is metalloc-placement: an OpenStack Placement 8.0
// compatible API (microversions 1.0 to 1.39) on PostgreSQL, in its own
// schema ("placement", migrations/00003_placement.sql). Resource providers
// with inventories of resource classes, traits and aggregates; consumers
// whose allocations claim capacity on providers; usages. Every change to a
// provider bumps its generation, and writers compare-and-set it, so
// concurrent clients never push a provider over capacity
// (docs/architecture.md, "The specifications, in short": Placement generic
// resource pools and aggregate generation).
//
// Errors use Placement's body ({"errors": [...]}, see web.PlacementError);
// microversions are negotiated by web.PlacementVersion.
package placement
