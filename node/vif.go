package node

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// VIFs (virtual network interfaces) attached to a node: Ironic's
// /v1/nodes/{ident}/vifs (1.28), answered by the node's network interface.
// noop records nothing (attach and detach succeed, the list is empty), as
// Ironic's noop network interface; flat records each VIF on a port or port
// group of the node (internal_info tenant_vif_port_id), chosen as Ironic's
// VIFPortIDMixin chooses it: port groups before ports, PXE-enabled ports
// first, a free one (409 when the VIF is attached already, 400 when none is
// free). metalloc has no network service to tell (no Neutron): attaching
// only records. Changes hold the node's row lock, which every port and
// port group change takes too (lock order: node, then its ports).

// vifPort is a port or port group a VIF may be attached to.
type vifPort struct {
	id    int64
	uuid  uuid.UUID
	group bool
	pxe   bool
	vif   string
	// member: a port of a port group.
	member *int64
}

func (p vifPort) kind() string {
	if p.group {
		return "Portgroup"
	}
	return "Port"
}

// vifPorts reads the node's ports and port groups (ports first, as
// Ironic's task.ports + task.portgroups).
func vifPorts(ctx context.Context, q *Queries, nodeID int64) ([]vifPort, error) {
	ports, err := q.NodeVIFPorts(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("reading ports: %w", err)
	}
	groups, err := q.NodeVIFPortgroups(ctx, nodeID)
	if err != nil {
		return nil, fmt.Errorf("reading port groups: %w", err)
	}
	var out []vifPort
	for _, p := range ports {
		out = append(out, vifPort{id: p.ID, uuid: p.Uuid, pxe: p.PxeEnabled, vif: p.Vif, member: p.PortgroupID})
	}
	for _, g := range groups {
		out = append(out, vifPort{id: g.ID, uuid: g.Uuid, group: true, pxe: true, vif: g.Vif})
	}
	return out, nil
}

// ListVIFs returns the VIFs attached to node n's ports then port groups
// (flat); noop records none.
func (s *Store) ListVIFs(ctx context.Context, n *Node) ([]string, error) {
	if n.impl("network") != "flat" {
		return []string{}, nil
	}
	all, err := vifPorts(ctx, s.q, n.ID)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, p := range all {
		if p.vif != "" {
			out = append(out, p.vif)
		}
	}
	return out, nil
}

// AttachVIF attaches VIF vif to node ident (flat: to a free port or port
// group, or the one portUUID or groupUUID names). Errors are *Error with
// Ironic's messages (VifAlreadyAttached 409, NoFreePhysicalPorts 400).
func (s *Store) AttachVIF(ctx context.Context, ident, vif string, portUUID, groupUUID *uuid.UUID) error {
	return s.vifTx(ctx, ident, func(q *Queries, n Node, all []vifPort) error {
		p, err := freePort(all, vif, portUUID, groupUUID)
		if err != nil {
			return err
		}
		if p.group {
			return q.SetPortgroupVIF(ctx, SetPortgroupVIFParams{ID: p.id, Vif: vif})
		}
		return q.SetPortVIF(ctx, SetPortVIFParams{ID: p.id, Vif: vif})
	})
}

// freePort is Ironic's get_free_port_like_object without physical
// networks (there is no network service to ask for them).
func freePort(all []vifPort, vif string, portUUID, groupUUID *uuid.UUID) (vifPort, error) {
	for _, p := range all {
		if p.vif == vif {
			return vifPort{}, conflictf("Unable to attach VIF because VIF %s is already attached to Ironic %s %s", vif, p.kind(), p.uuid)
		}
	}
	busyGroups := map[int64]bool{}
	members := map[int64][]vifPort{}
	var free []vifPort
	for _, p := range all {
		if p.group || (portUUID != nil && *portUUID != p.uuid) {
			continue
		}
		if p.vif != "" {
			if p.member != nil {
				busyGroups[*p.member] = true
			}
			continue
		}
		if p.member == nil && groupUUID == nil {
			free = append(free, p)
		} else if p.member != nil {
			members[*p.member] = append(members[*p.member], p)
		}
	}
	if portUUID == nil {
		for _, g := range all {
			if !g.group || (groupUUID != nil && *groupUUID != g.uuid) || g.vif != "" {
				continue
			}
			if busyGroups[g.id] {
				if groupUUID == nil {
					free = append(free, members[g.id]...)
				}
			} else if len(members[g.id]) > 0 {
				free = append(free, g)
			}
		}
	}
	if len(free) == 0 {
		return vifPort{}, invalidf("Unable to attach VIF %s, not enough free physical ports.", vif)
	}
	// Port groups before ports, then PXE-enabled ports; otherwise in order.
	slices.SortStableFunc(free, func(a, b vifPort) int {
		rank := func(p vifPort) int {
			r := 0
			if p.group {
				r += 2
			}
			if p.pxe {
				r++
			}
			return r
		}
		return rank(b) - rank(a)
	})
	return free[0], nil
}

// DetachVIF detaches VIF vif from node ident (flat: from the port group or
// port holding it; 400 VifNotAttached when none does).
func (s *Store) DetachVIF(ctx context.Context, ident, vif string) error {
	return s.vifTx(ctx, ident, func(q *Queries, n Node, all []vifPort) error {
		// Port groups first, as Ironic looks them up.
		slices.SortStableFunc(all, func(a, b vifPort) int {
			if a.group == b.group {
				return 0
			}
			if a.group {
				return -1
			}
			return 1
		})
		for _, p := range all {
			if p.vif != vif {
				continue
			}
			if p.group {
				return q.ClearPortgroupVIF(ctx, p.id)
			}
			return q.ClearPortVIF(ctx, p.id)
		}
		return invalidf("Unable to detach VIF %s from node %s because it is not attached to it.", vif, n.UUID)
	})
}

// vifTx runs fn on node ident's ports and port groups in a transaction
// holding the node's row lock (waited for at most LockWait, then
// NodeLocked, as every change of a node), when its network interface is flat (noop
// records nothing: fn is not called).
func (s *Store) vifTx(ctx context.Context, ident string, fn func(q *Queries, n Node, all []vifPort) error) error {
	return s.lockedTx(ctx, ident, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		n, err := s.get(ctx, q, ident, true)
		if err != nil || n.impl("network") != "flat" {
			return err
		}
		all, err := vifPorts(ctx, q, n.ID)
		if err != nil {
			return err
		}
		return fn(q, n, all)
	})
}

// listVIFs is GET /nodes/{ident}/vifs.
func (h *Handler) listVIFs(c echo.Context, n *Node, _ map[string]any) error {
	if _, err := hardwareOf(n); err != nil {
		return err
	}
	vifs, err := h.store.ListVIFs(c.Request().Context(), n)
	if err != nil {
		return err
	}
	out := make([]map[string]string, len(vifs))
	for i, v := range vifs {
		out[i] = map[string]string{"id": v}
	}
	return c.JSON(http.StatusOK, map[string]any{"vifs": out})
}

// attachVIF is POST /nodes/{ident}/vifs with {"id": <vif>, ...}
// (VIF_VALIDATOR; from 1.67 port_uuid or portgroup_uuid, not both).
func (h *Handler) attachVIF(c echo.Context, n *Node, _ map[string]any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if body == nil {
		body = map[string]any{}
	}
	if err := validateSchema(vifSchema, "vif", body); err != nil {
		return apiError(err, "")
	}
	doc := body.(map[string]any)
	id := doc["id"].(string)
	if !isUUIDLike(id) && !isValidLogicalName(id) {
		return web.BadRequest("Expected UUID or name for id: %s", id)
	}
	if _, err := hardwareOf(n); err != nil {
		return err
	}
	_, hasPort := doc["port_uuid"]
	_, hasGroup := doc["portgroup_uuid"]
	if web.RequestVersion(c).AtLeast(1, 67) && hasPort && hasGroup {
		return web.BadRequest("Cannot specify both port_uuid and portgroup_uuid")
	}
	var portUUID, groupUUID *uuid.UUID
	if s, ok := doc["port_uuid"].(string); ok {
		u, _ := uuid.Parse(s)
		portUUID = &u
	}
	if s, ok := doc["portgroup_uuid"].(string); ok {
		u, _ := uuid.Parse(s)
		groupUUID = &u
	}
	if err := h.store.AttachVIF(c.Request().Context(), n.UUID.String(), id, portUUID, groupUUID); err != nil {
		return apiError(err, n.UUID.String())
	}
	return c.NoContent(http.StatusNoContent)
}

// detachVIF is DELETE /nodes/{ident}/vifs/{vif}.
func (h *Handler) detachVIF(c echo.Context, n *Node, _ map[string]any) error {
	vif := c.Param("vif")
	if !isUUIDLike(vif) && !isValidLogicalName(vif) {
		return web.BadRequest("Expected UUID or name for vif_id: %s", vif)
	}
	if _, err := hardwareOf(n); err != nil {
		return err
	}
	if err := h.store.DetachVIF(c.Request().Context(), n.UUID.String(), vif); err != nil {
		return apiError(err, n.UUID.String())
	}
	return c.NoContent(http.StatusNoContent)
}
