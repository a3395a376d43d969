package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Provision states, as in Ironic (ironic/common/states.py). metalloc's
// transitions complete at once, so the transient states (deploying, cleaning,
// ...) are only ever seen inside a transaction, but every state is listed so
// that filters and stored values from real Ironic are understood.
const (
	StateEnroll       = "enroll"
	StateVerifying    = "verifying"
	StateManageable   = "manageable"
	StateAvailable    = "available"
	StateActive       = "active"
	StateDeploying    = "deploying"
	StateDeployWait   = "wait call-back"
	StateDeployFail   = "deploy failed"
	StateDeleting     = "deleting"
	StateCleaning     = "cleaning"
	StateCleanWait    = "clean wait"
	StateCleanFail    = "clean failed"
	StateError        = "error"
	StateInspecting   = "inspecting"
	StateInspectFail  = "inspect failed"
	StateInspectWait  = "inspect wait"
	StateAdopting     = "adopting"
	StateAdoptFail    = "adopt failed"
	StateRescue       = "rescue"
	StateRescueFail   = "rescue failed"
	StateRescueWait   = "rescue wait"
	StateRescuing     = "rescuing"
	StateUnrescueFail = "unrescue failed"
	StateUnrescuing   = "unrescuing"
)

// UpdateAllowedStates are the transitional provision states in which a node
// with a target provision state may still be updated, and its allocation
// removed (Ironic common/states.py UPDATE_ALLOWED_STATES).
var UpdateAllowedStates = []string{StateDeployFail, StateInspecting, StateInspectFail, StateInspectWait,
	StateCleanFail, StateError, StateVerifying, StateAdoptFail, StateRescueFail, StateUnrescueFail}

// Limits Ironic enforces on node fields.
const (
	// MaxTraitsPerNode is the most traits a node may have.
	MaxTraitsPerNode = 50
	// MaxResourceClassLength is the longest resource class.
	MaxResourceClassLength = 80
	// MaxDescriptionLength is the longest description.
	MaxDescriptionLength = 4096
)

// Power states and power targets, as in Ironic.
const (
	PowerOn       = "power on"
	PowerOff      = "power off"
	Rebooting     = "rebooting"
	SoftRebooting = "soft rebooting"
	SoftPowerOff  = "soft power off"
)

// Faults a node in maintenance may carry (ironic/common/faults.py); the
// `fault` list filter accepts only these.
var validFaults = []string{"power failure", "clean failure", "rescue abort failure"}

// InterfaceFields are the node's hardware interface fields, stored in
// Node.Interfaces under these keys.
var InterfaceFields = []string{
	"bios_interface", "boot_interface", "console_interface", "deploy_interface",
	"inspect_interface", "management_interface", "network_interface",
	"power_interface", "raid_interface", "rescue_interface",
	"storage_interface", "vendor_interface",
}

// Node is a bare-metal node: the domain model behind Ironic's node resource
// and the nodes table. JSON-valued fields are decoded objects (never nil after
// a read from the store). Fields Ironic has but metalloc does not store
// (chassis, clean/deploy steps, inspection times, boot mode) are rendered as
// their empty values by the API.
type Node struct {
	// ID is the internal primary key (never shown by the API).
	ID int64
	// UUID is the public identifier.
	UUID uuid.UUID
	// Name is the optional logical name, unique among nodes.
	Name *string
	// Driver is the hardware type, e.g. "fake-hardware".
	Driver string
	// ResourceClass is what allocations match on (at most 80 characters).
	ResourceClass *string
	// ProvisionState is the current provision state (StateEnroll, ...).
	ProvisionState string
	// TargetProvisionState is the state a running transition aims at (nil
	// when none is running, which is always the case between requests).
	TargetProvisionState *string
	// ProvisionUpdatedAt is when ProvisionState last changed.
	ProvisionUpdatedAt *time.Time
	// PowerState is "power on", "power off" or nil (unknown).
	PowerState *string
	// TargetPowerState is the power state being reached, if any.
	TargetPowerState *string
	// Maintenance marks a node operators took out of service.
	Maintenance bool
	// MaintenanceReason is the operator's reason for Maintenance.
	MaintenanceReason *string
	// Fault is why the service put the node into maintenance itself.
	Fault *string
	// LastError is the last failure a person should see.
	LastError *string
	// InstanceUUID is the instance (or allocation) using the node.
	InstanceUUID *uuid.UUID
	// AllocationID is the allocation holding the node (internal id).
	AllocationID *int64
	// AllocationUUID is that allocation's uuid (read-only, from a join).
	AllocationUUID *uuid.UUID
	// Owner, Lessee and Description are free-form.
	Owner, Lessee, Description *string
	// ConductorGroup limits which conductors serve the node ("" = default);
	// stored lower-case.
	ConductorGroup string
	// Reservation is the hostname of the conductor holding the node lock.
	Reservation *string
	// Protected nodes cannot be undeployed, rebuilt or deleted.
	Protected       bool
	ProtectedReason *string
	// Retired nodes are not made available again once torn down.
	Retired       bool
	RetiredReason *string
	// AutomatedClean overrides the service default (nil = default).
	AutomatedClean *bool
	// ConsoleEnabled tells whether the serial console is on.
	ConsoleEnabled bool
	// Shard groups nodes for sharded consumers.
	Shard *string
	// Reservable puts the node in the pool leases take from (package
	// lease; Blazar's "freepool"): on-demand allocations of projects other
	// than its lessee never take it. A metalloc extension (issue 43),
	// shown and patched as "reservable" at every microversion.
	Reservable bool
	// Properties, Extra, InstanceInfo, DriverInfo, DriverInternalInfo,
	// NetworkData, RaidConfig and TargetRaidConfig are JSON objects.
	Properties         map[string]any
	Extra              map[string]any
	InstanceInfo       map[string]any
	DriverInfo         map[string]any
	DriverInternalInfo map[string]any
	NetworkData        map[string]any
	RaidConfig         map[string]any
	TargetRaidConfig   map[string]any
	// Interfaces maps interface fields (InterfaceFields) to implementation
	// names, e.g. "deploy_interface": "fake".
	Interfaces map[string]string
	// Traits are the node's traits, sorted.
	Traits []string
	// ChassisID is the chassis (package chassis) the node is in, if any;
	// ChassisUUID its uuid (read-only, from a subquery). Changes set
	// ChassisID.
	ChassisID   *int64
	ChassisUUID *uuid.UUID
	// history are the events (history.go) to record with the node's next
	// write; never read back.
	history []historyEvent
	// CreatedAt and UpdatedAt are row timestamps.
	CreatedAt time.Time
	UpdatedAt *time.Time
}

// Clone returns a deep copy of n (JSON-valued fields are copied through
// JSON), so a change can be computed without touching the original.
func (n Node) Clone() Node {
	c := n
	c.Name = clonePtr(n.Name)
	c.ResourceClass = clonePtr(n.ResourceClass)
	c.TargetProvisionState = clonePtr(n.TargetProvisionState)
	c.ProvisionUpdatedAt = clonePtr(n.ProvisionUpdatedAt)
	c.PowerState = clonePtr(n.PowerState)
	c.TargetPowerState = clonePtr(n.TargetPowerState)
	c.MaintenanceReason = clonePtr(n.MaintenanceReason)
	c.Fault = clonePtr(n.Fault)
	c.LastError = clonePtr(n.LastError)
	c.InstanceUUID = clonePtr(n.InstanceUUID)
	c.AllocationID = clonePtr(n.AllocationID)
	c.AllocationUUID = clonePtr(n.AllocationUUID)
	c.Owner = clonePtr(n.Owner)
	c.Lessee = clonePtr(n.Lessee)
	c.Description = clonePtr(n.Description)
	c.Reservation = clonePtr(n.Reservation)
	c.ProtectedReason = clonePtr(n.ProtectedReason)
	c.RetiredReason = clonePtr(n.RetiredReason)
	c.AutomatedClean = clonePtr(n.AutomatedClean)
	c.Shard = clonePtr(n.Shard)
	c.Properties = cloneObject(n.Properties)
	c.Extra = cloneObject(n.Extra)
	c.InstanceInfo = cloneObject(n.InstanceInfo)
	c.DriverInfo = cloneObject(n.DriverInfo)
	c.DriverInternalInfo = cloneObject(n.DriverInternalInfo)
	c.NetworkData = cloneObject(n.NetworkData)
	c.RaidConfig = cloneObject(n.RaidConfig)
	c.TargetRaidConfig = cloneObject(n.TargetRaidConfig)
	c.Interfaces = maps.Clone(n.Interfaces)
	c.Traits = slices.Clone(n.Traits)
	c.UpdatedAt = clonePtr(n.UpdatedAt)
	c.ChassisID = clonePtr(n.ChassisID)
	c.ChassisUUID = clonePtr(n.ChassisUUID)
	return c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func cloneObject(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	if c, ok := copyJSONValue(m); ok {
		return c.(map[string]any)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return maps.Clone(m)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return maps.Clone(m)
	}
	return out
}

// copyJSONValue deep-copies v when it holds only what a JSON round trip
// gives back unchanged (objects, arrays, strings, float64, booleans,
// null): what cloneObject's round trip would return, without encoding
// (a node import clones every node's objects). ok is false for anything
// else (json.Number, Go types), which cloneObject round-trips.
func copyJSONValue(v any) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			c, ok := copyJSONValue(e)
			if !ok {
				return nil, false
			}
			m[k] = c
		}
		return m, true
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			c, ok := copyJSONValue(e)
			if !ok {
				return nil, false
			}
			s[i] = c
		}
		return s, true
	case string, float64, bool, nil:
		return x, true
	}
	return nil, false
}

// ErrNotFound is returned (wrapped) when no node matches an identifier.
var ErrNotFound = errors.New("node not found")

// ErrorKind classifies a client-visible failure of a node operation; the
// HTTP handler maps each kind to a status code in one place (apiError).
type ErrorKind int

// Error kinds and the HTTP statuses they become.
const (
	// KindInvalid is a request that can never succeed as sent (400).
	KindInvalid ErrorKind = iota + 1
	// KindConflict is a request the node's current state forbids (409).
	KindConflict
	// KindForbidden is an operation the node forbids, e.g. protected (403).
	KindForbidden
	// KindNotFound is a missing sub-resource, e.g. a trait (404).
	KindNotFound
	// KindNotAcceptable is a feature the requested microversion lacks (406).
	KindNotAcceptable
)

// Error is a node operation failure a client can act on, carrying the
// message Ironic would give for the same condition.
type Error struct {
	Kind    ErrorKind
	Message string
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

func invalidf(format string, args ...any) *Error {
	return &Error{Kind: KindInvalid, Message: fmt.Sprintf(format, args...)}
}

func conflictf(format string, args ...any) *Error {
	return &Error{Kind: KindConflict, Message: fmt.Sprintf(format, args...)}
}

func forbiddenf(format string, args ...any) *Error {
	return &Error{Kind: KindForbidden, Message: fmt.Sprintf(format, args...)}
}

func notFoundf(format string, args ...any) *Error {
	return &Error{Kind: KindNotFound, Message: fmt.Sprintf(format, args...)}
}

func notAcceptable() *Error {
	return &Error{Kind: KindNotAcceptable, Message: "Request not acceptable."}
}

// errInvalidStateRequested is Ironic's InvalidStateRequested (400).
func errInvalidStateRequested(action, node, state string) *Error {
	return invalidf("The requested action \"%s\" can not be performed on node \"%s\" while it is in state \"%s\".",
		action, node, state)
}

// errNodeInMaintenance is Ironic's NodeInMaintenance (400).
func errNodeInMaintenance(op string, node uuid.UUID) *Error {
	return invalidf("The %s operation can't be performed on node %s because it's in maintenance mode.", op, node)
}

// errNodeProtected is Ironic's NodeProtected (403).
func errNodeProtected(node uuid.UUID) *Error {
	return forbiddenf("Node %s is protected and cannot be undeployed, rebuilt or deleted", node)
}

// errNodeAssociated is Ironic's NodeAssociated (409).
func errNodeAssociated(node uuid.UUID, instance uuid.UUID) *Error {
	return conflictf("Node %s is associated with instance %s.", node, instance)
}

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func strOrNone(p *string) string {
	if p == nil {
		return "None"
	}
	return *p
}
