package port

import (
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Port is a node's network interface, as Ironic's Port object: identified
// by uuid, unique by MAC address (stored lower case), optionally a member
// of one of its node's port groups.
type Port struct {
	ID      int64
	UUID    uuid.UUID
	Address string // MAC address, lower case
	// NodeID/NodeUUID is the node the port belongs to.
	NodeID   int64
	NodeUUID uuid.UUID
	// PortgroupID/PortgroupUUID is the port group it is a member of (nil:
	// none).
	PortgroupID   *int64
	PortgroupUUID *uuid.UUID
	// PXEEnabled says whether the node boots from this port (default true).
	PXEEnabled bool
	// LocalLinkConnection describes the switch port (port_id, switch_id,
	// switch_info, hostname, network_type); empty when unknown.
	LocalLinkConnection map[string]any
	// PhysicalNetwork is the physical network the port is on (nil: none).
	PhysicalNetwork *string
	// IsSmartNIC marks a Smart NIC port (Ironic 1.53).
	IsSmartNIC bool
	Extra      map[string]any
	// InternalInfo is Ironic's read-only internal_info (always {} here:
	// metalloc attaches no VIFs).
	InternalInfo map[string]any
	CreatedAt    time.Time
	UpdatedAt    *time.Time
	// NodeOwner and NodeLessee are the node's, for access rules (Ironic
	// checks port access on its node).
	NodeOwner, NodeLessee *string
}

// Portgroup is a group of a node's ports (a bond), as Ironic's Portgroup
// object: identified by uuid or name, unique by name and by MAC address.
type Portgroup struct {
	ID       int64
	UUID     uuid.UUID
	Name     *string
	NodeID   int64
	NodeUUID uuid.UUID
	// Address is the group's MAC address, lower case (nil: none).
	Address *string
	// Mode is the bonding mode (nil: the default, Ironic's
	// [DEFAULT]default_portgroup_mode "active-backup", applied at create).
	Mode *string
	// Properties are the bond's settings (miimon, xmit_hash_policy ...).
	Properties map[string]any
	// StandalonePortsSupported says whether member ports may be used alone
	// (when false, no member port may have pxe_enabled true).
	StandalonePortsSupported bool
	Extra                    map[string]any
	InternalInfo             map[string]any
	CreatedAt                time.Time
	UpdatedAt                *time.Time
	NodeOwner, NodeLessee    *string
}

// DefaultPortgroupMode is the mode a port group gets when created without
// one (Ironic's [DEFAULT]default_portgroup_mode default).
const DefaultPortgroupMode = "active-backup"

// ErrNotFound is returned (wrapped) for a missing port, port group or node.
var ErrNotFound = errors.New("not found")

// macRE is oslo's netutils.is_valid_mac: six colon-separated hex octets.
var macRE = regexp.MustCompile(`^[0-9a-f]{2}(:[0-9a-f]{2}){5}$`)

// datapathRE is an OpenFlow datapath id: 16 hex digits.
var datapathRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

// NormalizeMAC returns the lower-case form of a valid MAC address
// (aa:bb:cc:dd:ee:ff, any case) and true, or false when s is not one.
func NormalizeMAC(s string) (string, bool) {
	l := strings.ToLower(s)
	return l, macRE.MatchString(l)
}
