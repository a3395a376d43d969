package node

import (
	"context"
	"fmt"
	"slices"

	"github.com/metalloc/metalloc/driver"
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

// FakeDriver is the default Driver: the hardware types of package
// driver's registry (fake-hardware, ipmi), whose operations all complete at
// once. Operations always succeed and only SetPower changes the node (its
// power state).
//
// Validate checks a node's interfaces against its hardware type in the
// registry and fills in the defaults. With Registered set, the hardware
// type must also be served by a live conductor of the node's conductor
// group, as Ironic's API requires (the hash ring lookup of POST and PATCH
// /v1/nodes); without it any name is accepted, and the interfaces of types
// the registry does not know (ipmi's cousins from inventories exported from
// Ironic, say) are stored as given and not defaulted, since metalloc never
// calls them.
type FakeDriver struct {
	// Registered reports whether a live conductor of group serves the
	// hardware type name (nil: any name is accepted).
	Registered func(ctx context.Context, name, group string) (bool, error)
}

// FakeHardware is the name of Ironic's fake hardware type.
const FakeHardware = driver.FakeHardware

// Validate implements Driver.
func (d FakeDriver) Validate(ctx context.Context, n *Node) error {
	if d.Registered != nil {
		ok, err := d.Registered(ctx, n.Driver, n.ConductorGroup)
		if err != nil {
			return fmt.Errorf("looking up the conductors of driver %s: %w", n.Driver, err)
		}
		if !ok {
			return invalidf("No valid host was found. Reason: No conductor service registered which supports driver %s for conductor group \"%s\".",
				n.Driver, n.ConductorGroup)
		}
	}
	if n.Interfaces == nil {
		n.Interfaces = map[string]string{}
	}
	for k := range n.Interfaces {
		if !slices.Contains(InterfaceFields, k) || n.Interfaces[k] == "" {
			delete(n.Interfaces, k)
		}
	}
	ht, ok := driver.Lookup(n.Driver)
	if !ok {
		return nil
	}
	if err := ht.Check(n.Interfaces); err != nil {
		return invalidf("%s", err.Error())
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
