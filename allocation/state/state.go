// Package state is the one definition of the states of an allocation and of
// an allocation group (package allocation, package allocgroup), and of the
// moves between them. The schema enforces the same moves with triggers
// (allocations_state_guard, allocation_groups_state_guard; db/schema.sql);
// TestTransitionsMatchTheSchema checks that both agree. sqlc types the
// state columns of allocations and allocation_groups as State (sqlc.yaml).
package state

// State is the state of an allocation or an allocation group, as Ironic
// names an allocation's (common/states.py): allocating is the initial state,
// active holds nodes, error is final.
type State string

// The states.
const (
	// Allocating: waiting for a conductor to reserve its node(s).
	Allocating State = "allocating"
	// Active: holding its node(s).
	Active State = "active"
	// Error: nothing could be reserved; last_error says why. Final.
	Error State = "error"
)

// All is every state, in the order above.
var All = []State{Allocating, Active, Error}

// String is the state's name.
func (s State) String() string { return string(s) }

// Transitions maps each state of an allocation to the states it may move to:
// allocating moves once, to active or error; active and error are final
// (an active allocation is deleted, never changed back).
var Transitions = map[State][]State{
	Allocating: {Active, Error},
}

// GroupTransitions is Transitions for an allocation group: as an
// allocation, and an active group moves back to allocating when it grows
// (PATCH count up), and to error as a grow's failure may not leave it active
// (the conductor writes active with count = its members then; the schema
// allows error too). Error is final.
var GroupTransitions = map[State][]State{
	Allocating: {Active, Error},
	Active:     {Allocating, Error},
}
