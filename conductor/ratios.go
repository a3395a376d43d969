package conductor

import (
	"math"
	"sort"
	"strconv"
	"strings"
)

// Generic resource classes the resource tracker reports when
// report_generic_resources is on, with the named ratio options that apply
// to them (cpu_, ram_, disk_allocation_ratio and their initial_ forms).
const (
	ClassVCPU     = "VCPU"
	ClassMemoryMB = "MEMORY_MB"
	ClassDiskGB   = "DISK_GB"
)

// DefaultInitialRatios are the initial allocation ratios of the generic
// classes when nothing is configured: Nova's initial_cpu_allocation_ratio
// (16.0), initial_ram_allocation_ratio (1.5) and
// initial_disk_allocation_ratio (1.0). Every other class starts at 1.0.
var DefaultInitialRatios = map[string]float64{ClassVCPU: 16.0, ClassMemoryMB: 1.5, ClassDiskGB: 1.0}

// Ratios are the allocation-ratio options by resource class, as
// docs/architecture.md, "Initial allocation ratios" (Nova's initial-allocation-ratios
// blueprint) defines them. Keys are Placement resource class names
// (VCPU, CUSTOM_BAREMETAL_GOLD).
type Ratios struct {
	// Override holds the configured xxx_allocation_ratio options that are
	// set (not None): such a ratio replaces the provider's on every sync,
	// even one an operator set through the Placement API. A value ≤ 0 (an
	// explicit 0.0, which upgrade-check refuses) is ignored.
	Override map[string]float64
	// Initial holds the initial_xxx_allocation_ratio options: the ratio an
	// inventory gets when the tracker first creates it (classes without an
	// entry: 1.0).
	Initial map[string]float64
}

// validRatio reports whether r may be written as an allocation_ratio: a
// finite number above 0 (0.0 would multiply the capacity away, Nova bug
// 1789654).
func validRatio(r float64) bool { return r > 0 && !math.IsInf(r, 0) && !math.IsNaN(r) }

// override is the configured override of class rc, if one is set and valid.
func (r Ratios) override(rc string) *float64 {
	if v, ok := r.Override[rc]; ok && validRatio(v) {
		return &v
	}
	return nil
}

// initial is the initial ratio of class rc (1.0 when none or an invalid one
// is configured).
func (r Ratios) initial(rc string) float64 {
	if v, ok := r.Initial[rc]; ok && validRatio(v) {
		return v
	}
	if v, ok := DefaultInitialRatios[rc]; ok {
		return v
	}
	return 1.0
}

// For is the allocation ratio to write for class rc of a provider whose
// current inventory of that class has ratio existing (nil when the class
// has no inventory yet). See ChooseRatio.
func (r Ratios) For(rc string, existing *float64) float64 {
	return ChooseRatio(r.override(rc), existing, r.initial(rc))
}

// Repair is the ratio the online data migration writes over an inventory
// whose allocation_ratio is 0.0 or missing: the override if one is set,
// else the initial ratio (the spec's "在线数据迁移").
func (r Ratios) Repair(rc string) float64 {
	return ChooseRatio(r.override(rc), nil, r.initial(rc))
}

// ChooseRatio is the allocation-ratio rule of the initial-allocation-ratios
// spec, as Nova's resource tracker applies it since Stein:
//
//  1. a configured override (not nil, > 0) wins, on every sync;
//  2. else an inventory that already exists keeps its ratio (one an operator
//     PUT through the Placement API is never overwritten);
//  3. else (the inventory is created now) the initial ratio.
//
// An existing ratio of 0.0 (or below, NaN, ±Inf) counts as missing, and
// ChooseRatio never returns 0.0: an invalid initial ratio gives 1.0.
func ChooseRatio(override, existing *float64, initial float64) float64 {
	switch {
	case override != nil && validRatio(*override):
		return *override
	case existing != nil && validRatio(*existing):
		return *existing
	case validRatio(initial):
		return initial
	default:
		return 1.0
	}
}

// InvalidRatios lists the configured ratio options that are explicitly 0.0
// (or otherwise not above 0), as "option=value" strings in a stable order:
// upgrade-check fails on them, as nova-status does for an explicit 0.0.
// Only overrides are checked (an initial ratio of 0.0 falls back to 1.0).
func (r Ratios) InvalidRatios() []string {
	var bad []string
	for rc, v := range r.Override {
		if !validRatio(v) {
			bad = append(bad, ratioOption(rc)+"="+formatRatio(v))
		}
	}
	sort.Strings(bad)
	return bad
}

// ratioOption names the configuration option that sets the override of rc.
func ratioOption(rc string) string {
	switch rc {
	case ClassVCPU:
		return "cpu_allocation_ratio"
	case ClassMemoryMB:
		return "ram_allocation_ratio"
	case ClassDiskGB:
		return "disk_allocation_ratio"
	}
	return "allocation_ratios." + rc
}

func formatRatio(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.ContainsAny(s, ".IN") {
		s += ".0"
	}
	return s
}
