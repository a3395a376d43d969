package driver

import (
	"fmt"
	"slices"
	"strings"

	"github.com/metalloc/metalloc/web"
)

// InterfaceTypes are Ironic's hardware interface types, in the order
// metalloc lists them (a node stores each as the field "<type>_interface").
var InterfaceTypes = []string{
	"bios", "boot", "console", "deploy", "inspect", "management",
	"network", "power", "raid", "rescue", "storage", "vendor",
}

// Interface is what a hardware type offers for one interface type: the
// implementations it enables, in the order Ironic's driver detail lists
// them, and the one a node gets when it names none.
type Interface struct {
	Default string
	Enabled []string
}

// HardwareType is one hardware type ("driver" in Ironic's API).
type HardwareType struct {
	// Name is the hardware type's name, e.g. "fake-hardware".
	Name string
	// className is Ironic's class name, which its IncompatibleInterface
	// message names.
	className string
	// anyEnabled: the type accepts any enabled implementation of every
	// interface type, as Ironic special-cases fake-hardware for testing.
	anyEnabled bool
	// Interfaces maps each of InterfaceTypes to what the type offers.
	Interfaces map[string]Interface
	// Properties are the driver_info keys the default interfaces document
	// (GET /v1/drivers/{name}/properties), with metalloc's descriptions.
	Properties map[string]string
}

// FakeHardware is the name of Ironic's fake hardware type.
const FakeHardware = "fake-hardware"

// types is the registry, in the order conductors register and the API
// lists them.
var types = []*HardwareType{
	{
		Name: FakeHardware, className: "FakeHardware", anyEnabled: true,
		Interfaces: map[string]Interface{
			"bios":       {"fake", []string{"fake", "no-bios"}},
			"boot":       {"fake", []string{"fake", "ipxe", "pxe"}},
			"console":    {"fake", []string{"fake", "no-console"}},
			"deploy":     {"fake", []string{"fake", "direct"}},
			"inspect":    {"fake", []string{"fake", "no-inspect"}},
			"management": {"fake", []string{"fake"}},
			"network":    {"noop", []string{"noop", "flat"}},
			"power":      {"fake", []string{"fake"}},
			"raid":       {"fake", []string{"fake", "no-raid", "agent"}},
			"rescue":     {"fake", []string{"fake", "no-rescue"}},
			"storage":    {"noop", []string{"noop", "fake"}},
			"vendor":     {"fake", []string{"fake", "no-vendor"}},
		},
		Properties: fakeProperties,
	},
	{
		Name: "ipmi", className: "IPMIHardware",
		Interfaces: map[string]Interface{
			"bios":       {"no-bios", []string{"no-bios"}},
			"boot":       {"ipxe", []string{"ipxe", "pxe"}},
			"console":    {"no-console", []string{"no-console"}},
			"deploy":     {"direct", []string{"direct"}},
			"inspect":    {"no-inspect", []string{"no-inspect"}},
			"management": {"ipmitool", []string{"ipmitool"}},
			"network":    {"flat", []string{"flat", "noop"}},
			"power":      {"ipmitool", []string{"ipmitool"}},
			"raid":       {"no-raid", []string{"no-raid", "agent"}},
			"rescue":     {"no-rescue", []string{"no-rescue"}},
			"storage":    {"noop", []string{"noop"}},
			"vendor":     {"ipmitool", []string{"ipmitool", "no-vendor"}},
		},
		Properties: ipmiProperties,
	},
}

// Names returns the registered hardware type names, in registry order:
// what a conductor registers (the drivers column of its conductors row).
func Names() []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = t.Name
	}
	return out
}

// Lookup returns the hardware type named name.
func Lookup(name string) (*HardwareType, bool) {
	for _, t := range types {
		if t.Name == name {
			return t, true
		}
	}
	return nil, false
}

// Enabled returns the implementations of ifaceType enabled on metalloc's
// conductors (Ironic's enabled_<type>_interfaces): the union over the
// registry, in registry order.
func Enabled(ifaceType string) []string {
	var out []string
	for _, t := range types {
		for _, impl := range t.Interfaces[ifaceType].Enabled {
			if !slices.Contains(out, impl) {
				out = append(out, impl)
			}
		}
	}
	return out
}

// Invalid is a driver or interface a node may not have, with the message
// Ironic gives (its status is 400).
type Invalid struct{ Message string }

// Error returns the message.
func (e *Invalid) Error() string { return e.Message }

func invalidf(format string, args ...any) *Invalid {
	return &Invalid{Message: fmt.Sprintf(format, args...)}
}

// Check validates the interface fields of a node of hardware type t
// (ifaces maps "<type>_interface" to an implementation name) and fills in
// the default of every one that is unset or empty, as Ironic's
// check_and_update_node_interfaces does. An implementation that is not
// enabled at all is Ironic's InterfaceNotFoundInEntrypoint; one enabled but
// not offered by t, IncompatibleInterface (fake-hardware accepts any
// enabled one). Keys that are not interface fields are left alone.
func (t *HardwareType) Check(ifaces map[string]string) error {
	for _, it := range InterfaceTypes {
		field := it + "_interface"
		impl := ifaces[field]
		if impl == "" {
			ifaces[field] = t.Interfaces[it].Default
			continue
		}
		enabled := Enabled(it)
		if !slices.Contains(enabled, impl) {
			quoted := make([]string, len(enabled))
			for i, s := range enabled {
				quoted[i] = web.PyRepr(s)
			}
			return invalidf("Could not find the following interface in the 'ironic.hardware.interfaces.%s' entrypoint: %s. Valid interfaces are [%s].",
				it, impl, strings.Join(quoted, ", "))
		}
		if !t.anyEnabled && !slices.Contains(t.Interfaces[it].Enabled, impl) {
			return invalidf("%s interface implementation '%s' is not supported by hardware type %s.", it, impl, t.className)
		}
	}
	return nil
}
