// Package scheduler picks nodes for allocations through a Placement service
// and returns them as Selection objects: for every requested instance the
// chosen node and up to max_alternates alternates, each carrying the
// allocation_request that claims it (docs/architecture.md, "Scheduler Selection objects";
// Nova's return-selection-objects). The conductor's Placement backend
// (conductor/backend.Placement) claims the first one with PUT
// /allocations/{consumer} and falls back to the alternates in order.
package scheduler

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/metalloc/metalloc/placement/client"
)

// SelectionVersion is the version of the Selection object this package
// writes ("1.1", as Nova's Selection with availability_zone). Minor versions
// only add optional fields; a reader accepts any 1.x and refuses other
// major versions (as the tests' DecodeSelection does).
const SelectionVersion = "1.1"

// selectionMajor is SelectionVersion's major version.
const selectionMajor = 1

// selectionMinor is SelectionVersion's minor version.
const selectionMinor = 1

// Selection is one destination for one requested instance: a node and the
// Placement allocation request that claims it. Its JSON encoding has a fixed
// field order and snake_case names matching Nova's Selection object fields.
type Selection struct {
	// Version is the Selection object's version ("1.1"; SelectionVersion).
	// Encode sets it when empty.
	Version string `json:"version"`
	// ComputeNodeUUID is the node's uuid, which is also its resource
	// provider's uuid in Placement.
	ComputeNodeUUID uuid.UUID `json:"compute_node_uuid"`
	// ServiceHost is the hostname of the conductor that made the selection.
	ServiceHost string `json:"service_host"`
	// NodeName is the node's hypervisor node name: for bare metal, as with
	// Nova's ironic driver, the node uuid in text form.
	NodeName string `json:"nodename"`
	// CellUUID is the cell the node lives in; nil (null) for metalloc,
	// which has no cells.
	CellUUID *uuid.UUID `json:"cell_uuid"`
	// Limits are the oversubscription limits the claim must respect; nil
	// (null) for bare-metal nodes, which are claimed whole.
	Limits *Limits `json:"limits"`
	// AllocationRequest is the JSON text of the allocation request that
	// claims this node (one entry of GET /allocation_candidates'
	// allocation_requests, dict form), stored as a string the way Nova's
	// Selection stores it. Request decodes it.
	AllocationRequest string `json:"allocation_request"`
	// AllocationRequestVersion is the Placement microversion the allocation
	// request was obtained with and must be claimed with (e.g. "1.39").
	AllocationRequestVersion string `json:"allocation_request_version"`
	// AvailabilityZone is the node's availability zone (added in 1.1); nil
	// (null) for metalloc.
	AvailabilityZone *string `json:"availability_zone"`
}

// Limits are per-destination resource limits, as Nova's SchedulerLimits:
// nil fields mean "no limit". Bare-metal selections carry no limits.
type Limits struct {
	// VCPU is the most VCPUs the destination may hand out.
	VCPU *int64 `json:"vcpu"`
	// MemoryMB is the most memory (MiB) the destination may hand out.
	MemoryMB *int64 `json:"memory_mb"`
	// DiskGB is the most disk (GiB) the destination may hand out.
	DiskGB *int64 `json:"disk_gb"`
}

// NewSelection returns the Selection of node for req, made by host, with
// req encoded as the allocation request obtained at microversion version.
func NewSelection(node uuid.UUID, host string, req client.AllocationRequest, version string) (Selection, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return Selection{}, fmt.Errorf("encoding the allocation request of node %s: %w", node, err)
	}
	return Selection{
		Version:                  SelectionVersion,
		ComputeNodeUUID:          node,
		ServiceHost:              host,
		NodeName:                 node.String(),
		AllocationRequest:        string(b),
		AllocationRequestVersion: version,
	}, nil
}

// Request decodes the allocation request, ready for client.Claim.
func (s Selection) Request() (client.AllocationRequest, error) {
	var r client.AllocationRequest
	if s.AllocationRequest == "" {
		return r, fmt.Errorf("selection of node %s has no allocation_request", s.ComputeNodeUUID)
	}
	if err := json.Unmarshal([]byte(s.AllocationRequest), &r); err != nil {
		return r, fmt.Errorf("selection of node %s: decoding allocation_request: %w", s.ComputeNodeUUID, err)
	}
	if len(r.Allocations) == 0 {
		return r, fmt.Errorf("selection of node %s: allocation_request allocates nothing", s.ComputeNodeUUID)
	}
	return r, nil
}

// Encode returns s's JSON encoding (Version set to SelectionVersion when
// empty). The encoding is stable: fields in declaration order, and the
// allocation request kept as the text it was given.
func (s Selection) Encode() ([]byte, error) {
	if s.Version == "" {
		s.Version = SelectionVersion
	}
	return json.Marshal(s)
}
