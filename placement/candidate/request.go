package candidate

import "github.com/google/uuid"

// ResourceAmount is one "CLASS:AMOUNT" of a resources query parameter.
type ResourceAmount struct {
	Class  string
	Amount int64
}

// Group is one request group: the unsuffixed one (suffix "", resources
// from any providers of one tree plus sharing providers) or a granular one
// (resources from a single provider).
type Group struct {
	Suffix          string
	SameProvider    bool
	Resources       []ResourceAmount // in the order given
	Required        [][]string       // ANDed any-of sets
	Forbidden       []string
	MemberOf        [][]uuid.UUID // ANDed any-of sets
	ForbiddenAggs   []uuid.UUID
	InTree          *uuid.UUID
	HasResourcesKey bool
}

// Request is a parsed GET /allocation_candidates (package placement parses
// the query string: Placement's RequestWideParams and RequestGroup).
type Request struct {
	Groups        []*Group // in order of first appearance in the query
	Limit         int
	GroupPolicy   string
	RootRequired  []string
	RootForbidden []string
	SameSubtrees  [][]string
}
