package node

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/metalloc/metalloc/web"
)

// Driver performs a node's hardware operations. metalloc drives no hardware:
// every operation completes before it returns, as with Ironic's
// fake-hardware type, and the state machine (Store.Provision,
// Store.SetPowerState) moves the node on at once. A Driver only changes the
// fields it is responsible for (power state, interfaces) on the node it is
// given; errors are recorded on the node as Ironic records failed
// asynchronous work (last_error, a *failed provision state).
type Driver interface {
	// Validate checks the node's driver (hardware type) and interface names
	// and fills every unset interface with the driver's default. It returns
	// *Error (invalid) with Ironic's message for an unknown driver or an
	// unsupported interface.
	Validate(ctx context.Context, n *Node) error
	// SetPower brings the node to target ("power on", "power off",
	// "rebooting", "soft rebooting", "soft power off") and records the
	// resulting power state on n.
	SetPower(ctx context.Context, n *Node, target string) error
	// Deploy writes the instance to the node.
	Deploy(ctx context.Context, n *Node) error
	// TearDown removes the instance from the node.
	TearDown(ctx context.Context, n *Node) error
	// Clean cleans the node (automated or manual cleaning).
	Clean(ctx context.Context, n *Node) error
}

// FakeDriver is the default Driver: Ironic's fake-hardware with the
// interface configuration of the reference deployment (fake interfaces,
// noop network and storage). Operations always succeed and only SetPower
// changes the node (its power state).
//
// Nodes of other hardware types (ipmi, redfish, ... as found in inventories
// exported from Ironic) are accepted unless HardwareTypes excludes them:
// their interface names are stored as given and not defaulted, since
// metalloc never calls them.
type FakeDriver struct {
	// HardwareTypes lists the accepted driver names; empty accepts any
	// name (metalloc drives no hardware, so the name is only a label).
	HardwareTypes []string
}

// FakeHardware is the name of Ironic's fake hardware type.
const FakeHardware = "fake-hardware"

// fakeInterfaces are, per interface field, the implementations the fake
// hardware type accepts; the first is the default.
var fakeInterfaces = map[string][]string{
	"bios_interface":       {"fake", "no-bios"},
	"boot_interface":       {"fake"},
	"console_interface":    {"fake", "no-console"},
	"deploy_interface":     {"fake"},
	"inspect_interface":    {"fake", "no-inspect"},
	"management_interface": {"fake"},
	"network_interface":    {"noop"},
	"power_interface":      {"fake"},
	"raid_interface":       {"fake", "no-raid"},
	"rescue_interface":     {"fake", "no-rescue"},
	"storage_interface":    {"noop", "fake"},
	"vendor_interface":     {"fake", "no-vendor"},
}

// Validate implements Driver.
func (d FakeDriver) Validate(_ context.Context, n *Node) error {
	if len(d.HardwareTypes) > 0 && !slices.Contains(d.HardwareTypes, n.Driver) {
		return invalidf("No valid host was found. Reason: No conductor service registered which supports driver %s for conductor group \"%s\".",
			n.Driver, n.ConductorGroup)
	}
	if n.Interfaces == nil {
		n.Interfaces = map[string]string{}
	}
	for k := range n.Interfaces {
		if !slices.Contains(InterfaceFields, k) || n.Interfaces[k] == "" {
			delete(n.Interfaces, k)
		}
	}
	if n.Driver != FakeHardware {
		return nil
	}
	for _, f := range InterfaceFields {
		valid := fakeInterfaces[f]
		v, ok := n.Interfaces[f]
		if !ok || v == "" {
			n.Interfaces[f] = valid[0]
			continue
		}
		if !slices.Contains(valid, v) {
			quoted := make([]string, len(valid))
			for i, s := range valid {
				quoted[i] = web.PyRepr(s)
			}
			return invalidf("Could not find the following interface in the 'ironic.hardware.interfaces.%s' entrypoint: %s. Valid interfaces are [%s].",
				strings.TrimSuffix(f, "_interface"), v, strings.Join(quoted, ", "))
		}
	}
	return nil
}

// SetPower implements Driver.
func (FakeDriver) SetPower(_ context.Context, n *Node, target string) error {
	switch target {
	case PowerOn, Rebooting, SoftRebooting:
		n.PowerState = ptr(PowerOn)
	case PowerOff, SoftPowerOff:
		n.PowerState = ptr(PowerOff)
	default:
		return fmt.Errorf("unsupported power state %q", target)
	}
	return nil
}

// Deploy implements Driver.
func (FakeDriver) Deploy(context.Context, *Node) error { return nil }

// TearDown implements Driver.
func (FakeDriver) TearDown(context.Context, *Node) error { return nil }

// Clean implements Driver.
func (FakeDriver) Clean(context.Context, *Node) error { return nil }
