// Package topology is the operator's topology for gang allocation (issue
// 15): a list of levels, coarse to fine (block, row, rack, switch ...), each
// read from a node field the operator already keeps, stored in table
// topology_levels so that every API and conductor process sees the same
// one.
//
// A node's path is one value per level; a domain at level L is the set of
// nodes sharing the first L+1 values of their paths, named by joining them
// with "/" (e.g. "1/01": row 1, rack 01). A node without a value at a level
// is in no domain of that level or finer.
//
// FreeCandidates reads the free nodes a request may take, with their paths
// (the same predicates as metalloc_pick, no locks). Choose, pure Go, turns
// them into plans for a group of Count nodes under a placement rule
// (required, preferred or none), best fit first, random among ties; a NoFit
// error explains per domain why nothing fits.
//
// The API (Handler) serves GET and PUT /v1/topology (a metalloc extension);
// `metalloc-manage topology set|show` is the command line.
package topology
