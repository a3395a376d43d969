package node

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// Fleet is the compact fleet summary of GET /v1/ui/fleet, the operator
// page's one read of the whole fleet (metalloc's own, no Ironic
// counterpart). Nodes are columns (parallel arrays, one entry per node in
// id order) whose repeated strings are indexes into the dictionaries, so
// 100,000 nodes stay a few megabytes of JSON.
type Fleet struct {
	// GeneratedAt is when the summary was read (RFC 3339, UTC).
	GeneratedAt time.Time `json:"generated_at"`
	// States are the node categories Nodes.State indexes: available,
	// allocated (holds an allocation or instance, or is active),
	// maintenance, manageable (enroll, manageable and the states between)
	// and error (error and the "... failed" states).
	States []string `json:"states"`
	// Classes, Owners and Traits are the dictionaries of resource classes,
	// owners ("" for none) and traits, sorted.
	Classes []string `json:"classes"`
	Owners  []string `json:"owners"`
	Traits  []string `json:"traits"`
	// Racks are the topology groups in natural order, each a row and rack
	// from the nodes' extra.row and extra.rack ("" when a node has none).
	Racks []FleetRack `json:"racks"`
	// ClassSummary is free/total per resource class, in Classes' order.
	ClassSummary []FreeTotal `json:"class_summary"`
	// Nodes are the nodes, as columns.
	Nodes FleetNodes `json:"nodes"`
}

// FleetRack is one rack of Fleet.Racks with its free and total node counts.
type FleetRack struct {
	Row  string `json:"row"`
	Rack string `json:"rack"`
	FreeTotal
}

// FreeTotal counts nodes: Free are those a conductor could reserve now
// (metalloc_node_free: available, not in maintenance, powered, no instance,
// no allocation), Total all of them.
type FreeTotal struct {
	Name  string `json:"name,omitempty"`
	Free  int    `json:"free"`
	Total int    `json:"total"`
}

// FleetNodes are Fleet's node columns; entry i of each describes node i.
type FleetNodes struct {
	UUID   []string `json:"uuid"`
	Name   []string `json:"name"`
	State  []int    `json:"state"`  // index into Fleet.States
	Class  []int    `json:"class"`  // index into Fleet.Classes
	Owner  []int    `json:"owner"`  // index into Fleet.Owners
	Rack   []int    `json:"rack"`   // index into Fleet.Racks
	Traits [][]int  `json:"traits"` // indexes into Fleet.Traits
	// ProvisionState is Ironic's provision_state, for the page's tooltip.
	ProvisionState []string `json:"provision_state"`
}

// fleetStates are Fleet.States, in the order of the constants below.
var fleetStates = []string{"available", "allocated", "maintenance", "manageable", "error"}

const (
	fleetAvailable = iota
	fleetAllocated
	fleetMaintenance
	fleetManageable
	fleetError
)

// fleetState puts a node into one of fleetStates: maintenance first (an
// operator's flag wins), then failure states, then holding an allocation
// or instance (or being deployed), then available; the rest (enroll,
// manageable, cleaning, inspecting...) is manageable.
func fleetState(r FleetNodesRow) int {
	ps := r.ProvisionState
	switch {
	case r.Maintenance:
		return fleetMaintenance
	case ps == "error" || strings.HasSuffix(ps, "failed"):
		return fleetError
	case r.Allocated || ps == "active" || ps == "deploying" || ps == "wait call-back":
		return fleetAllocated
	case ps == "available":
		return fleetAvailable
	}
	return fleetManageable
}

// Fleet reads the fleet summary: every node, or with project set only
// those project owns or leases (as GET /v1/nodes scopes a project reader).
func (s *Store) Fleet(ctx context.Context, project *string) (*Fleet, error) {
	rows, err := s.q.FleetNodes(ctx, project)
	if err != nil {
		return nil, err
	}
	return buildFleet(rows, time.Now().UTC()), nil
}

// buildFleet turns the rows into a Fleet read at now.
func buildFleet(rows []FleetNodesRow, now time.Time) *Fleet {
	f := &Fleet{GeneratedAt: now, States: fleetStates}
	classes, owners, traits := map[string]int{}, map[string]int{}, map[string]int{}
	type rackKey struct{ row, rack string }
	racks := map[rackKey]int{}
	for _, r := range rows {
		classes[r.ResourceClass] = 0
		owners[r.Owner] = 0
		racks[rackKey{r.Row, r.Rack}] = 0
		for _, t := range r.Traits {
			traits[t] = 0
		}
	}
	f.Classes, f.Owners, f.Traits = indexSorted(classes), indexSorted(owners), indexSorted(traits)
	keys := make([]rackKey, 0, len(racks))
	for k := range racks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b rackKey) int {
		return cmp.Or(NaturalCompare(a.row, b.row), NaturalCompare(a.rack, b.rack))
	})
	f.Racks = make([]FleetRack, len(keys))
	for i, k := range keys {
		racks[k] = i
		f.Racks[i] = FleetRack{Row: k.row, Rack: k.rack}
	}
	f.ClassSummary = make([]FreeTotal, len(f.Classes))
	for i, c := range f.Classes {
		f.ClassSummary[i].Name = c
	}
	n := len(rows)
	f.Nodes = FleetNodes{
		UUID: make([]string, n), Name: make([]string, n), State: make([]int, n), Class: make([]int, n),
		Owner: make([]int, n), Rack: make([]int, n), Traits: make([][]int, n), ProvisionState: make([]string, n),
	}
	for i, r := range rows {
		c, rk := classes[r.ResourceClass], racks[rackKey{r.Row, r.Rack}]
		f.Nodes.UUID[i] = r.Uuid.String()
		f.Nodes.Name[i] = r.Name
		f.Nodes.State[i] = fleetState(r)
		f.Nodes.Class[i] = c
		f.Nodes.Owner[i] = owners[r.Owner]
		f.Nodes.Rack[i] = rk
		f.Nodes.ProvisionState[i] = r.ProvisionState
		ts := make([]int, len(r.Traits))
		for j, t := range r.Traits {
			ts[j] = traits[t]
		}
		f.Nodes.Traits[i] = ts
		f.ClassSummary[c].Total++
		f.Racks[rk].Total++
		if r.Free {
			f.ClassSummary[c].Free++
			f.Racks[rk].Free++
		}
	}
	return f
}

// indexSorted sorts m's keys, sets each key's value to its index and
// returns the sorted keys.
func indexSorted(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	for i, k := range out {
		m[k] = i
	}
	return out
}

// NaturalCompare orders numbers numerically ("2" before "10"), numbers
// before other strings, "" last.
func NaturalCompare(a, b string) int {
	if (a == "") != (b == "") {
		if a == "" {
			return 1
		}
		return -1
	}
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	switch {
	case errA == nil && errB == nil:
		return cmp.Compare(x, y)
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// fleet serves GET /v1/ui/fleet: the Fleet summary, access-checked as
// GET /v1/nodes (ListScope: a project-scoped caller without
// baremetal:node:list_all gets its own nodes, one without a project 403).
// The body is gzip-compressed when the client accepts it.
func (h *Handler) fleet(c echo.Context) error {
	project, err := ListScope(c, h.opts.Rules, "node", nil)
	if err != nil {
		return err
	}
	f, err := h.store.Fleet(c.Request().Context(), project)
	if err != nil {
		return apiError(err, "")
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, f)
}
