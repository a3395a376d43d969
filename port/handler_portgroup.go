package port

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// portgroupPatchAllowed are the port group fields a PATCH may change.
var portgroupPatchAllowed = []string{"address", "extra", "mode", "name", "node_uuid", "properties",
	"standalone_ports_supported"}

// portgroupInvalidSortKeys are fields Ironic refuses to sort port groups by.
var portgroupInvalidSortKeys = []string{"extra", "internal_info", "properties"}

// portgroupDefaultFields are what a port group list shows without fields or
// detail.
var portgroupDefaultFields = []string{"uuid", "address", "name"}

// resourceNotFound is Ironic's NotFound for port group routes below 1.23.
func resourceNotFound() error { return web.NotFound("Resource could not be found.") }

// checkPortgroupFields is check_allowed_portgroup_fields: mode and
// properties need 1.26.
func checkPortgroupFields(v web.Version, fields []string) error {
	if !v.AtLeast(1, 26) && (slices.Contains(fields, "mode") || slices.Contains(fields, "properties")) {
		return notAcceptable()
	}
	return nil
}

// renderPortgroup is Ironic's portgroup convert_with_links.
func renderPortgroup(g *Portgroup, base string, fields []string) (map[string]any, error) {
	id := g.UUID.String()
	doc := map[string]any{
		"uuid": id, "address": strOrNil(g.Address), "name": strOrNil(g.Name), "node_uuid": g.NodeUUID.String(),
		"mode": strOrNil(g.Mode), "properties": orEmpty(g.Properties),
		"standalone_ports_supported": g.StandalonePortsSupported, "extra": orEmpty(g.Extra),
		"internal_info": orEmpty(g.InternalInfo), "created_at": web.Timestamp(&g.CreatedAt),
		"updated_at": web.Timestamp(g.UpdatedAt), "links": web.ResourceLinks(base, "portgroups", id),
		"ports": web.ResourceLinks(base, "portgroups", id+"/ports"),
	}
	return web.ProjectFields(doc, fields)
}

// validatePortgroupDoc applies Ironic's port group field validators to doc
// (already valid against portgroup.json), normalising in place.
func validatePortgroupDoc(doc map[string]any) error {
	if v, ok := doc["address"]; ok && v != nil {
		mac, err := macArg("address", v)
		if err != nil {
			return err
		}
		doc["address"] = mac
	}
	for _, k := range []string{"node_uuid", "standalone_ports_supported", "uuid"} {
		v, ok := doc[k]
		if !ok || v == nil {
			continue
		}
		if k == "standalone_ports_supported" {
			b, err := node.ParseBool(k, v)
			if err != nil {
				return apiError(err, nil)
			}
			doc[k] = b
		} else if _, err := uuidArg(k, pyStr(v)); err != nil {
			return err
		}
	}
	return nil
}

// portgroupFromDoc fills the stored fields of g from a validated document.
func portgroupFromDoc(g *Portgroup, doc map[string]any) {
	str := func(k string) *string {
		if s, ok := doc[k].(string); ok {
			return &s
		}
		return nil
	}
	g.Name, g.Address, g.Mode = str("name"), str("address"), str("mode")
	if g.Name != nil && *g.Name == "" {
		g.Name = nil
	}
	g.Properties, _ = doc["properties"].(map[string]any)
	g.Extra, _ = doc["extra"].(map[string]any)
	g.StandalonePortsSupported = true
	if b, ok := doc["standalone_ports_supported"].(bool); ok {
		g.StandalonePortsSupported = b
	}
}

func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case string:
		return x != ""
	case map[string]any:
		return len(x) > 0
	case bool:
		return x
	}
	return true
}

func (h *Handler) createPortgroup(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.RequestVersion(c)
	if !v.AtLeast(1, 23) {
		return resourceNotFound()
	}
	if err := loadSchemas(); err != nil {
		return err
	}
	doc, nodeUUID, nref, err := h.createDoc(c, "portgroup", portgroupSchema, validatePortgroupDoc, "baremetal:portgroup:create")
	if err != nil {
		return err
	}
	if !v.AtLeast(1, 26) && (truthy(doc["mode"]) || truthy(doc["properties"])) {
		return notAcceptable()
	}
	if name, ok := doc["name"].(string); ok && name != "" && !web.ValidLogicalName(name, web.IronicMaxVersion) {
		return web.BadRequest("Cannot create portgroup with invalid name '%s'", name)
	}
	g := Portgroup{NodeID: nref.ID}
	if s, ok := doc["uuid"].(string); ok && s != "" {
		g.UUID, _ = web.UUIDLike(s)
	}
	portgroupFromDoc(&g, doc)
	var out Portgroup
	if err := h.store.InTx(ctx, func(tx Tx) (err error) {
		out, err = tx.CreatePortgroup(ctx, g)
		return err
	}); err != nil {
		return apiError(err, web.BadRequest("Node %s could not be found.", nodeUUID))
	}
	resp, err := renderPortgroup(&out, h.base(c), nil)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, h.base(c)+"/v1/portgroups/"+out.UUID.String())
	return c.JSON(http.StatusCreated, resp)
}

// lookupPortgroup reads the port group of the path (uuid or name) and
// applies rule to it.
func (h *Handler) lookupPortgroup(c echo.Context, rule string) (Portgroup, error) {
	if err := uuidOrName("portgroup_ident", pathIdent(c)); err != nil {
		return Portgroup{}, err
	}
	return lookup(h, c, rule, portgroupNotFound, h.store.Portgroup)
}

func (h *Handler) getPortgroup(c echo.Context) error {
	if !web.RequestVersion(c).AtLeast(1, 23) {
		return resourceNotFound()
	}
	if err := node.CheckArgs(c, nil, "fields"); err != nil {
		return apiError(err, nil)
	}
	g, err := h.lookupPortgroup(c, "baremetal:portgroup:get")
	if err != nil {
		return err
	}
	fields, err := web.ParseFields(c)
	if err != nil {
		return err
	}
	if err := checkPortgroupFields(web.RequestVersion(c), fields); err != nil {
		return err
	}
	doc, err := renderPortgroup(&g, h.base(c), fields)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, doc)
}

func (h *Handler) deletePortgroup(c echo.Context) error {
	if !web.RequestVersion(c).AtLeast(1, 23) {
		return resourceNotFound()
	}
	g, err := h.lookupPortgroup(c, "baremetal:portgroup:delete")
	if err != nil {
		return err
	}
	return h.deleteIn(c, portgroupNotFound, func(ctx context.Context, tx Tx) error {
		return tx.DeletePortgroup(ctx, g.UUID.String())
	})
}

func (h *Handler) patchPortgroup(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.RequestVersion(c)
	if !v.AtLeast(1, 23) {
		return resourceNotFound()
	}
	if err := loadSchemas(); err != nil {
		return err
	}
	ident := pathIdent(c)
	if err := uuidOrName("portgroup_ident", ident); err != nil {
		return err
	}
	ops, err := readPatch(c)
	if err != nil {
		return err
	}
	g, err := h.lookupPortgroup(c, "baremetal:portgroup:update")
	if err != nil {
		return err
	}
	if !v.AtLeast(1, 26) && (isPathUpdated(ops, "/mode") || isPathUpdated(ops, "/properties")) {
		return notAcceptable()
	}
	if err := checkPatchAllowed(ops, portgroupPatchAllowed); err != nil {
		return err
	}
	for _, name := range node.PatchValues(ops, "/name") {
		if s, ok := name.(string); ok && s != "" && !web.ValidLogicalName(s, web.IronicMaxVersion) {
			return web.BadRequest("Portgroup %s: Cannot change name to invalid name '%s'", ident, s)
		}
	}
	var out Portgroup
	err = h.store.InTx(ctx, func(tx Tx) (err error) {
		out, err = tx.UpdatePortgroup(ctx, g.UUID.String(), func(cur Portgroup, n NodeRef, ports int64) (Portgroup, error) {
			return patchPortgroup(c, tx, v, cur, n, ports, ops)
		})
		return err
	})
	if err != nil {
		return apiError(err, portgroupNotFound(ident))
	}
	doc, err := renderPortgroup(&out, h.base(c), nil)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, doc)
}

// patchPortgroup applies ops to cur (its node n locked; ports is its
// number of member ports) with Ironic's API and conductor rules.
func patchPortgroup(c echo.Context, tx Tx, v web.Version, cur Portgroup, n NodeRef, ports int64, ops []node.PatchOp) (Portgroup, error) {
	doc := map[string]any{
		"uuid": cur.UUID.String(), "name": strOrNil(cur.Name), "address": strOrNil(cur.Address),
		"node_uuid": cur.NodeUUID.String(), "mode": strOrNil(cur.Mode), "properties": orEmpty(cur.Properties),
		"standalone_ports_supported": cur.StandalonePortsSupported, "extra": orEmpty(cur.Extra),
		"internal_info": orEmpty(cur.InternalInfo), "created_at": web.Timestamp(&cur.CreatedAt),
		"updated_at": web.Timestamp(cur.UpdatedAt),
	}
	patched, err := node.ApplyPatch(c.Request().Context(), doc, ops)
	if err != nil {
		return Portgroup{}, apiError(err, nil)
	}
	if _, ok := patched["mode"]; !ok {
		return Portgroup{}, web.BadRequest("'mode' is a mandatory attribute and can not be removed")
	}
	target, err := patchNodeTarget(c, tx, n, patched["node_uuid"])
	if err != nil {
		return Portgroup{}, err
	}
	for k := range patched {
		if !portgroupSchemaProp[k] {
			delete(patched, k)
		}
	}
	if err := node.ValidateSchema(portgroupSchema, "patch", patched); err != nil {
		return Portgroup{}, apiError(err, nil)
	}
	if err := validatePortgroupDoc(patched); err != nil {
		return Portgroup{}, err
	}
	next := cur
	portgroupFromDoc(&next, patched)
	next.NodeID = target.ID
	if target.ProvisionState == "inspecting" && v.AtLeast(1, 39) {
		return Portgroup{}, web.Conflict("Cannot update portgroup \"%s\" on node \"%s\" while it is in state \"inspecting\".",
			cur.UUID, target.UUID)
	}
	if next.NodeID != cur.NodeID {
		// The conductor's update_portgroup rules for a move.
		if !slices.Contains(connectivityStates, target.ProvisionState) && !target.Maintenance {
			return Portgroup{}, web.Conflict("Portgroup %s can not be associated to node %s unless the node is in a %s state or in maintenance mode.",
				cur.UUID, target.UUID, strings.Join(connectivityStates, ", "))
		}
		if ports > 0 {
			return Portgroup{}, web.BadRequest("Portgroup %s can not be associated with node %s because there are ports associated with this portgroup.",
				cur.UUID, target.UUID)
		}
	}
	return next, nil
}

// listPortgroups serves GET /portgroups[/detail] and
// /nodes/{ident}/portgroups[/detail].
func (h *Handler) listPortgroups(detailPath, underNode bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		v := web.RequestVersion(c)
		q := c.QueryParams()
		if underNode && !v.AtLeast(1, 24) {
			return web.NotFound("The resource could not be found.")
		}
		if !v.AtLeast(1, 23) {
			return resourceNotFound()
		}
		allowed := []string{"node", "address", "marker", "limit", "sort_key", "sort_dir"}
		if !detailPath {
			allowed = append(allowed, "fields", "detail")
		}
		if err := node.CheckArgs(c, nil, allowed...); err != nil {
			return apiError(err, nil)
		}
		if q.Has("node") {
			if err := uuidOrName("node", q.Get("node")); err != nil {
				return err
			}
		}
		address, err := addressFilter(q)
		if err != nil {
			return err
		}
		lp, err := h.parseList(c)
		if err != nil {
			return err
		}
		nodeIdent := q.Get("node")
		if underNode {
			ident := pathIdent(c)
			if err := uuidOrName("node", ident); err != nil {
				return err
			}
			n, err := h.store.Node(ctx, ident)
			if err != nil {
				return apiError(err, nodeNotFound(ident))
			}
			if err := h.checkOn(c, n.Owner, n.Lessee, nodeNotFound(ident), "baremetal:node:get"); err != nil {
				return err
			}
			nodeIdent = n.UUID.String()
		}
		project, err := node.ListScope(c, h.opts.Rules, "portgroup", nil)
		if err != nil {
			return err
		}
		var fields []string
		if !detailPath {
			if fields, err = web.ParseFields(c); err != nil {
				return err
			}
			if err := checkPortgroupFields(v, fields); err != nil {
				return err
			}
		}
		if err := checkPortgroupFields(v, []string{c.QueryParam("sort_key")}); err != nil {
			return err
		}
		if !detailPath {
			if fields, err = web.ReturnFields(c, fields, lp.detail, portgroupDefaultFields); err != nil {
				return err
			}
		}
		opts, err := h.pageParams(c, portgroupInvalidSortKeys, PortgroupSortKeys)
		if err != nil {
			return err
		}
		if opts.Marker != nil {
			if _, err := h.store.Portgroup(ctx, opts.Marker.String()); err != nil {
				return apiError(err, portgroupNotFound(q.Get("marker")))
			}
		}
		opts.Project = project
		if nodeIdent != "" {
			n, err := h.store.Node(ctx, nodeIdent)
			if err != nil {
				return apiError(err, nodeNotFound(nodeIdent))
			}
			opts.NodeID = &n.ID
		} else if address != nil {
			opts.Address = address
		}
		groups, err := h.store.ListPortgroups(ctx, opts)
		if err != nil {
			return apiError(err, portgroupNotFound(q.Get("marker")))
		}
		return web.ListAnswer(c, h.base(c), "portgroups", listResource("portgroups", detailPath), opts.Limit, groups,
			func(g *Portgroup) (map[string]any, error) { return renderPortgroup(g, h.base(c), fields) },
			func(g *Portgroup) string { return g.UUID.String() })
	}
}
