package port

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// Importer is node.PortImporter: it creates or updates the ports and port
// groups a node entry of an `openstack baremetal create` file lists, as
// ironicclient's create_resources would POST them (a port group's own
// "ports" become its members), validated as POST /v1/ports and
// /v1/portgroups validate them at the newest microversion. It is
// idempotent: a port matches an existing one by uuid, else by MAC address;
// a port group by uuid, else name, else MAC address; a match gets the
// fields the entry sets. A port or port group that exists on another node
// is an error.
type Importer struct{}

// ImportPorts imports portgroups and ports of node n inside tx (which holds
// n's row lock).
func (Importer) ImportPorts(ctx context.Context, tx pgx.Tx, n node.Node, portgroups, ports []any) (node.PortCounts, error) {
	var counts node.PortCounts
	if err := loadSchemas(); err != nil {
		return counts, err
	}
	t := Tx{q: New(tx)}
	for i, raw := range portgroups {
		doc, ok := raw.(map[string]any)
		if !ok {
			return counts, fmt.Errorf("portgroup %d: expected an object, got %s", i+1, web.PyRepr(raw))
		}
		doc = maps.Clone(doc)
		members, _ := doc["ports"].([]any)
		if v, ok := doc["ports"]; ok && members == nil && v != nil {
			return counts, fmt.Errorf("portgroup %d: ports must be a list", i+1)
		}
		delete(doc, "ports")
		g, changed, err := importPortgroup(ctx, t, n, doc)
		if err != nil {
			return counts, fmt.Errorf("portgroup %d: %w", i+1, err)
		}
		if changed {
			counts.Portgroups++
		}
		for j, raw := range members {
			changed, err := importPort(ctx, t, n, raw, &g)
			if err != nil {
				return counts, fmt.Errorf("portgroup %d: port %d: %w", i+1, j+1, err)
			}
			if changed {
				counts.Ports++
			}
		}
	}
	for i, raw := range ports {
		changed, err := importPort(ctx, t, n, raw, nil)
		if err != nil {
			return counts, fmt.Errorf("port %d: %w", i+1, err)
		}
		if changed {
			counts.Ports++
		}
	}
	return counts, nil
}

// setParent sets doc[key] to want, refusing a different value there.
func setParent(doc map[string]any, key, want, what string) error {
	if v, ok := doc[key]; ok && v != nil && v != want {
		return fmt.Errorf("%s %v differs from the %s it is listed under (%s)", key, v, what, want)
	}
	doc[key] = want
	return nil
}

func importPortgroup(ctx context.Context, t Tx, n node.Node, doc map[string]any) (Portgroup, bool, error) {
	if err := setParent(doc, "node_uuid", n.UUID.String(), "node"); err != nil {
		return Portgroup{}, false, err
	}
	if err := node.ValidateSchema(portgroupSchema, "portgroup", doc); err != nil {
		return Portgroup{}, false, err
	}
	if err := validatePortgroupDoc(doc); err != nil {
		return Portgroup{}, false, err
	}
	if name, ok := doc["name"].(string); ok && name != "" && !web.ValidLogicalName(name, web.IronicMaxVersion) {
		return Portgroup{}, false, fmt.Errorf("invalid portgroup name '%s'", name)
	}
	want := Portgroup{NodeID: n.ID}
	if s, ok := doc["uuid"].(string); ok && s != "" {
		want.UUID, _ = web.UUIDLike(s)
	}
	portgroupFromDoc(&want, doc)

	cur, found, err := findPortgroup(ctx, t, want)
	if err != nil {
		return Portgroup{}, false, err
	}
	if !found {
		g, err := t.CreatePortgroup(ctx, want)
		return g, true, err
	}
	if cur.NodeID != n.ID {
		return Portgroup{}, false, fmt.Errorf("portgroup %s belongs to node %s", cur.UUID, cur.NodeUUID)
	}
	next := cur
	for k := range doc {
		switch k {
		case "name":
			next.Name = want.Name
		case "address":
			next.Address = want.Address
		case "mode":
			if want.Mode != nil && *want.Mode != "" {
				next.Mode = want.Mode
			}
		case "properties":
			next.Properties = want.Properties
		case "extra":
			next.Extra = want.Extra
		case "standalone_ports_supported":
			next.StandalonePortsSupported = want.StandalonePortsSupported
		}
	}
	if equalPtr(next.Name, cur.Name) && equalPtr(next.Address, cur.Address) && equalPtr(next.Mode, cur.Mode) &&
		jsonEqual(next.Properties, cur.Properties) && jsonEqual(next.Extra, cur.Extra) &&
		next.StandalonePortsSupported == cur.StandalonePortsSupported {
		return cur, false, nil
	}
	g, err := t.UpdatePortgroup(ctx, cur.UUID.String(), func(Portgroup, NodeRef, int64) (Portgroup, error) { return next, nil })
	return g, true, err
}

// findPortgroup finds the port group an entry refers to: by uuid, else by
// name, else by address.
func findPortgroup(ctx context.Context, t Tx, want Portgroup) (Portgroup, bool, error) {
	var ident string
	switch {
	case want.UUID != uuid.Nil:
		ident = want.UUID.String()
	case want.Name != nil:
		ident = *want.Name
	case want.Address != nil:
		u, err := t.q.PortgroupUUIDByAddress(ctx, want.Address)
		if errors.Is(err, pgx.ErrNoRows) {
			return Portgroup{}, false, nil
		}
		if err != nil {
			return Portgroup{}, false, fmt.Errorf("finding portgroup %s: %w", *want.Address, err)
		}
		ident = u.String()
	default:
		return Portgroup{}, false, nil
	}
	g, err := t.Portgroup(ctx, ident)
	if errors.Is(err, ErrNotFound) {
		return Portgroup{}, false, nil
	}
	return g, err == nil, err
}

func importPort(ctx context.Context, t Tx, n node.Node, raw any, pg *Portgroup) (bool, error) {
	doc, ok := raw.(map[string]any)
	if !ok {
		return false, fmt.Errorf("expected an object, got %s", web.PyRepr(raw))
	}
	doc = maps.Clone(doc)
	if err := setParent(doc, "node_uuid", n.UUID.String(), "node"); err != nil {
		return false, err
	}
	if pg != nil {
		if err := setParent(doc, "portgroup_uuid", pg.UUID.String(), "portgroup"); err != nil {
			return false, err
		}
	}
	if err := node.ValidateSchema(portSchema, "port", doc); err != nil {
		return false, err
	}
	if err := validatePortDoc(doc); err != nil {
		return false, err
	}
	want := Port{NodeID: n.ID}
	if s, ok := doc["uuid"].(string); ok && s != "" {
		want.UUID, _ = web.UUIDLike(s)
	}
	portFromDoc(&want, doc)
	if s, ok := doc["portgroup_uuid"].(string); ok && s != "" {
		g, err := t.Portgroup(ctx, s)
		if err != nil {
			return false, err
		}
		if g.NodeID != n.ID {
			//lint:ignore ST1005 Ironic's text, word for word (clients match on it)
			return false, errors.New("Port can not be added to a portgroup belonging to a different node.")
		}
		want.PortgroupID = &g.ID
	}
	if b, _ := doc["is_smartnic"].(bool); b && !smartNICLinkOK(doc["local_link_connection"]) {
		//lint:ignore ST1005 Ironic's text, word for word (clients match on it)
		return false, errors.New("Smart NIC port must have port_id and hostname in local_link_connection")
	}
	if want.PhysicalNetwork != nil && *want.PhysicalNetwork == "" {
		//lint:ignore ST1005 Ironic's text, word for word (clients match on it)
		return false, errors.New("A non-empty value is required when setting physical_network")
	}

	ident := want.UUID
	if ident == uuid.Nil {
		u, err := t.q.PortUUIDByAddress(ctx, want.Address)
		if errors.Is(err, pgx.ErrNoRows) {
			_, err := t.CreatePort(ctx, want)
			return err == nil, err
		}
		if err != nil {
			return false, fmt.Errorf("finding port %s: %w", want.Address, err)
		}
		ident = u
	}
	cur, err := t.Port(ctx, ident)
	if errors.Is(err, ErrNotFound) {
		_, err := t.CreatePort(ctx, want)
		return err == nil, err
	}
	if err != nil {
		return false, err
	}
	if cur.NodeID != n.ID {
		//lint:ignore ST1005 Ironic's text (PortAlreadyExists), with the port and node it is on
		return false, fmt.Errorf("A port with MAC address %s already exists (port %s of node %s).", cur.Address, cur.UUID, cur.NodeUUID)
	}
	next := cur
	for k := range doc {
		switch k {
		case "address":
			next.Address = want.Address
		case "pxe_enabled":
			next.PXEEnabled = want.PXEEnabled
		case "local_link_connection":
			next.LocalLinkConnection = want.LocalLinkConnection
		case "physical_network":
			next.PhysicalNetwork = want.PhysicalNetwork
		case "is_smartnic":
			next.IsSmartNIC = want.IsSmartNIC
		case "extra":
			next.Extra = want.Extra
		case "portgroup_uuid":
			next.PortgroupID = want.PortgroupID
		}
	}
	if next.Address == cur.Address && next.PXEEnabled == cur.PXEEnabled && next.IsSmartNIC == cur.IsSmartNIC &&
		jsonEqual(next.LocalLinkConnection, cur.LocalLinkConnection) && jsonEqual(next.Extra, cur.Extra) &&
		equalPtr(next.PhysicalNetwork, cur.PhysicalNetwork) && equalPtr(next.PortgroupID, cur.PortgroupID) {
		return false, nil
	}
	_, err = t.UpdatePort(ctx, cur.UUID, func(Port, NodeRef) (Port, error) { return next, nil })
	return err == nil, err
}
