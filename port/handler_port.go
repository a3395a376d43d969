package port

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// portFieldMinor is the microversion minor each port field appeared in
// (hidden below it; asking for it there is 406).
var portFieldMinor = map[string]int{
	"internal_info": 18, "pxe_enabled": 19, "local_link_connection": 19,
	"portgroup_uuid": 24, "physical_network": 34, "is_smartnic": 53,
}

// portPatchAllowed are the port fields a PATCH may change.
var portPatchAllowed = []string{"address", "extra", "is_smartnic", "local_link_connection",
	"node_uuid", "physical_network", "portgroup_uuid", "pxe_enabled"}

// portInvalidSortKeys are fields Ironic refuses to sort ports by.
var portInvalidSortKeys = []string{"extra", "internal_info", "local_link_connection"}

// portDefaultFields are what a port list shows without fields or detail.
var portDefaultFields = []string{"uuid", "address"}

// Node states in which a port's connectivity may change (conductor
// update_port) and a port group may move to another node.
var connectivityStates = []string{"enroll", "inspecting", "inspect wait", "manageable"}

// checkPortFields is Ironic's _check_allowed_port_fields: 406 for a field
// (or local_link_connection/network_type, 1.64) newer than v.
func checkPortFields(v web.Version, fields []string, llc any) error {
	for _, f := range fields {
		if m, ok := portFieldMinor[f]; ok && f != "internal_info" && !v.AtLeast(1, m) {
			return notAcceptable()
		}
		if f == "local_link_connection/network_type" && !v.AtLeast(1, 64) {
			return notAcceptable()
		}
	}
	if m, ok := llc.(map[string]any); ok && !v.AtLeast(1, 64) {
		if _, ok := m["network_type"]; ok {
			return notAcceptable()
		}
	}
	return nil
}

// renderPort is Ironic's port convert_with_links at v: every field v has,
// links, and only fields when given (400 for fields a port does not have).
func renderPort(p *Port, v web.Version, base string, fields []string) (map[string]any, error) {
	var pg any
	if p.PortgroupUUID != nil {
		pg = p.PortgroupUUID.String()
	}
	doc := map[string]any{
		"uuid": p.UUID.String(), "address": p.Address, "node_uuid": p.NodeUUID.String(),
		"portgroup_uuid": pg, "pxe_enabled": p.PXEEnabled, "local_link_connection": orEmpty(p.LocalLinkConnection),
		"physical_network": strOrNil(p.PhysicalNetwork), "is_smartnic": p.IsSmartNIC,
		"extra": orEmpty(p.Extra), "internal_info": orEmpty(p.InternalInfo),
		"created_at": web.Timestamp(&p.CreatedAt), "updated_at": web.Timestamp(p.UpdatedAt),
		"links": web.ResourceLinks(base, "ports", p.UUID.String()),
	}
	if _, err := web.ProjectFields(doc, fields); err != nil {
		return nil, err
	}
	for f, m := range portFieldMinor {
		if !v.AtLeast(1, m) {
			delete(doc, f)
		}
	}
	return web.Project(doc, fields), nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func strOrNil(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// validatePortDoc applies Ironic's port field validators to doc (already
// valid against port.json), normalising in place: MAC addresses lower
// case, booleans from strings, local_link_connection's switch_id.
func validatePortDoc(doc map[string]any) error {
	if v, ok := doc["address"]; ok && v != nil {
		mac, err := macArg("address", v)
		if err != nil {
			return err
		}
		doc["address"] = mac
	}
	for _, k := range []string{"node_uuid", "is_smartnic", "local_link_connection", "portgroup_uuid", "pxe_enabled", "uuid"} {
		v, ok := doc[k]
		if !ok || v == nil {
			continue
		}
		switch k {
		case "node_uuid", "portgroup_uuid", "uuid":
			if _, err := uuidArg(k, pyStr(v)); err != nil {
				return err
			}
		case "is_smartnic", "pxe_enabled":
			b, err := node.ParseBool(k, v)
			if err != nil {
				return apiError(err, nil)
			}
			doc[k] = b
		case "local_link_connection":
			if err := node.ValidateSchema(llcSch, k, v); err != nil {
				return apiError(err, nil)
			}
			m := v.(map[string]any)
			if sw, ok := m["switch_id"].(string); ok {
				if mac, ok := NormalizeMAC(sw); ok {
					m["switch_id"] = mac
				} else if l := strings.ToLower(sw); datapathRE.MatchString(l) {
					m["switch_id"] = l
				} else {
					return web.BadRequest("Expected a MAC address or OpenFlow datapath ID but received %s.", sw)
				}
			}
		}
	}
	return nil
}

// portFromDoc fills the stored fields of p from a validated port document.
func portFromDoc(p *Port, doc map[string]any) {
	p.Address, _ = doc["address"].(string)
	p.PXEEnabled = true
	if b, ok := doc["pxe_enabled"].(bool); ok {
		p.PXEEnabled = b
	}
	p.IsSmartNIC, _ = doc["is_smartnic"].(bool)
	p.LocalLinkConnection, _ = doc["local_link_connection"].(map[string]any)
	p.Extra, _ = doc["extra"].(map[string]any)
	p.PhysicalNetwork = nil
	if s, ok := doc["physical_network"].(string); ok {
		p.PhysicalNetwork = &s
	}
}

// smartNICLinkOK reports whether a Smart NIC port's local_link_connection
// names port_id and hostname (LOCAL_LINK_SMART_NIC_SCHEMA). As in Ironic,
// whose schema validator passes None, a port without one is not checked.
func smartNICLinkOK(llc any) bool {
	m, ok := llc.(map[string]any)
	if !ok {
		return llc == nil
	}
	_, a := m["port_id"]
	_, b := m["hostname"]
	return a && b
}

func (h *Handler) createPort(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.RequestVersion(c)
	if err := loadSchemas(); err != nil {
		return err
	}
	doc, nodeUUID, nref, err := h.createDoc(c, "port", portSchema, validatePortDoc, "baremetal:port:create")
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	if err := checkPortFields(v, keys, doc["local_link_connection"]); err != nil {
		return err
	}
	p := Port{NodeID: nref.ID}
	if s, ok := doc["uuid"].(string); ok && s != "" {
		p.UUID, _ = web.UUIDLike(s)
	}
	portFromDoc(&p, doc)
	var pg *Portgroup
	if s, ok := doc["portgroup_uuid"].(string); ok && s != "" {
		g, err := h.store.Portgroup(ctx, s)
		if err != nil {
			return apiError(err, web.BadRequest("Portgroup %s could not be found.", s))
		}
		if g.NodeID != nref.ID {
			return web.BadRequest("Port can not be added to a portgroup belonging to a different node.")
		}
		pg, p.PortgroupID = &g, &g.ID
	}
	if b, _ := doc["is_smartnic"].(bool); b && !smartNICLinkOK(doc["local_link_connection"]) {
		return web.BadRequest("Smart NIC port must have port_id and hostname in local_link_connection")
	}
	if p.PhysicalNetwork != nil && *p.PhysicalNetwork == "" {
		return web.BadRequest("A non-empty value is required when setting physical_network")
	}
	if b, _ := doc["pxe_enabled"].(bool); pg != nil && b && !pg.StandalonePortsSupported {
		return web.Conflict("Port group %s doesn't support standalone ports. This port cannot be created as a member of that portgroup as the port's 'pxe_enabled' field was set to True.", pg.UUID)
	}
	var out Port
	if err := h.store.InTx(ctx, func(tx Tx) (err error) {
		out, err = tx.CreatePort(ctx, p)
		return err
	}); err != nil {
		return apiError(err, web.BadRequest("Node %s could not be found.", nodeUUID))
	}
	resp, err := renderPort(&out, v, h.base(c), nil)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, h.base(c)+"/v1/ports/"+out.UUID.String())
	return c.JSON(http.StatusCreated, resp)
}

// lookupPort reads the port of the path and applies rule to it
// (check_port_policy_and_retrieve).
func (h *Handler) lookupPort(c echo.Context, rule string) (Port, error) {
	u, err := uuidArg("port_uuid", pathIdent(c))
	if err != nil {
		return Port{}, err
	}
	return lookup(h, c, rule, portNotFound, func(ctx context.Context, _ string) (Port, error) { return h.store.Port(ctx, u) })
}

func (h *Handler) getPort(c echo.Context) error {
	v := web.RequestVersion(c)
	if err := node.CheckArgs(c, nil, "fields"); err != nil {
		return apiError(err, nil)
	}
	p, err := h.lookupPort(c, "baremetal:port:get")
	if err != nil {
		return err
	}
	fields, err := web.ParseFields(c)
	if err != nil {
		return err
	}
	if err := checkPortFields(v, fields, nil); err != nil {
		return err
	}
	doc, err := renderPort(&p, v, h.base(c), fields)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, doc)
}

func (h *Handler) deletePort(c echo.Context) error {
	p, err := h.lookupPort(c, "baremetal:port:delete")
	if err != nil {
		return err
	}
	return h.deleteIn(c, portNotFound, func(ctx context.Context, tx Tx) error { return tx.DeletePort(ctx, p.UUID) })
}

// isPathUpdated is Ironic's api_utils.is_path_updated, which looks at the
// first operation of the patch only.
func isPathUpdated(ops []node.PatchOp, path string) bool {
	if len(ops) == 0 {
		return false
	}
	return ops[0].Path == path || strings.HasPrefix(ops[0].Path, path+"/")
}

// isPathRemoved is api_utils.is_path_removed.
func isPathRemoved(ops []node.PatchOp, path string) bool {
	for _, op := range ops {
		if op.Op == "remove" && (op.Path == path || strings.HasPrefix(op.Path, path+"/")) {
			return true
		}
	}
	return false
}

// checkPatchAllowed is patch_validate_allowed_fields.
func checkPatchAllowed(ops []node.PatchOp, allowed []string) error {
	for _, op := range ops {
		if !slices.Contains(allowed, strings.Split(op.Path, "/")[1]) {
			return web.BadRequest("Cannot patch %s. Only the following can be updated: %s", op.Path, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// patchNodeTarget resolves a patched node_uuid (Ironic's Node.get, 400
// when missing) and locks it after cur (Tx.LockSecond).
func patchNodeTarget(c echo.Context, tx Tx, cur NodeRef, value any) (NodeRef, error) {
	s, ok := value.(string)
	if !ok || s == cur.UUID.String() {
		return cur, nil
	}
	if _, ok := web.UUIDLike(s); !ok {
		return NodeRef{}, web.BadRequest("Expected an uuid or int but received %s.", s)
	}
	ctx := c.Request().Context()
	n, err := tx.Node(ctx, s)
	if err != nil {
		return NodeRef{}, apiError(err, web.BadRequest("Node %s could not be found.", s))
	}
	return tx.LockSecond(ctx, cur.ID, n.ID)
}

func (h *Handler) patchPort(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.RequestVersion(c)
	if err := loadSchemas(); err != nil {
		return err
	}
	if _, err := uuidArg("port_uuid", pathIdent(c)); err != nil {
		return err
	}
	ops, err := readPatch(c)
	if err != nil {
		return err
	}
	if err := checkPatchAllowed(ops, portPatchAllowed); err != nil {
		return err
	}
	var touched []string
	for _, f := range []string{"pxe_enabled", "local_link_connection", "portgroup_uuid", "physical_network",
		"is_smartnic", "local_link_connection/network_type"} {
		if len(node.PatchValues(ops, "/"+f)) > 0 || isPathRemoved(ops, "/"+f) {
			touched = append(touched, f)
		}
	}
	if err := checkPortFields(v, touched, nil); err != nil {
		return err
	}
	p, err := h.lookupPort(c, "baremetal:port:update")
	if err != nil {
		return err
	}
	var out Port
	err = h.store.InTx(ctx, func(tx Tx) (err error) {
		out, err = tx.UpdatePort(ctx, p.UUID, func(cur Port, n NodeRef) (Port, error) {
			return patchPort(c, tx, v, cur, n, ops)
		})
		return err
	})
	if err != nil {
		return apiError(err, portNotFound(pathIdent(c)))
	}
	doc, err := renderPort(&out, v, h.base(c), nil)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, doc)
}

// patchPort applies ops to cur (its node n locked) with Ironic's API and
// conductor rules, and returns the port to store.
func patchPort(c echo.Context, tx Tx, v web.Version, cur Port, n NodeRef, ops []node.PatchOp) (Port, error) {
	ctx := c.Request().Context()
	var pg any
	if cur.PortgroupUUID != nil {
		pg = cur.PortgroupUUID.String()
	}
	doc := map[string]any{
		"uuid": cur.UUID.String(), "address": cur.Address, "node_uuid": cur.NodeUUID.String(),
		"portgroup_uuid": pg, "pxe_enabled": cur.PXEEnabled,
		"local_link_connection": orEmpty(cur.LocalLinkConnection), "physical_network": strOrNil(cur.PhysicalNetwork),
		"is_smartnic": cur.IsSmartNIC, "extra": orEmpty(cur.Extra), "internal_info": orEmpty(cur.InternalInfo),
		"created_at": web.Timestamp(&cur.CreatedAt), "updated_at": web.Timestamp(cur.UpdatedAt),
	}
	patched, err := node.ApplyPatch(c.Request().Context(), doc, ops)
	if err != nil {
		return Port{}, apiError(err, nil)
	}
	next := cur
	if isPathUpdated(ops, "/portgroup_uuid") {
		next.PortgroupID = nil
		if s, ok := patched["portgroup_uuid"].(string); ok && s != "" {
			u, isUUID := web.UUIDLike(s)
			var g Portgroup
			err := ErrNotFound
			if isUUID {
				g, err = tx.Portgroup(ctx, u.String())
			}
			if err != nil {
				return Port{}, apiError(err, web.BadRequest("Portgroup %s could not be found.", s))
			}
			next.PortgroupID = &g.ID
		}
	}
	target, err := patchNodeTarget(c, tx, n, patched["node_uuid"])
	if err != nil {
		return Port{}, err
	}
	next.NodeID = target.ID
	for k := range patched {
		if !portSchemaProps[k] {
			delete(patched, k)
		}
	}
	if err := node.ValidateSchema(portSchema, "patch", patched); err != nil {
		return Port{}, apiError(err, nil)
	}
	if err := validatePortDoc(patched); err != nil {
		return Port{}, err
	}
	portFromDoc(&next, patched)
	if target.ProvisionState == "inspecting" && v.AtLeast(1, 39) {
		return Port{}, web.Conflict("Cannot update port \"%s\" on \"%s\" while it is in state \"inspecting\".", cur.UUID, target.UUID)
	}
	if isPathUpdated(ops, "/physical_network") && next.PhysicalNetwork != nil && *next.PhysicalNetwork == "" {
		return Port{}, web.BadRequest("A non-empty value is required when setting physical_network")
	}
	// The conductor's update_port rules, on the node the port ends on.
	if (target.ProvisionState == "active" || target.InstanceUUID != nil) && next.Address != cur.Address && !target.Maintenance {
		return Port{}, web.Conflict("Cannot update hardware address for port %s as node %s is active or has instance UUID assigned",
			cur.UUID, target.UUID)
	}
	connectivity := !equalPtr(next.PortgroupID, cur.PortgroupID) || next.PXEEnabled != cur.PXEEnabled ||
		!jsonEqual(next.LocalLinkConnection, cur.LocalLinkConnection) || !equalPtr(next.PhysicalNetwork, cur.PhysicalNetwork)
	if connectivity && !slices.Contains(connectivityStates, target.ProvisionState) && !target.Maintenance {
		return Port{}, web.Conflict("Port %s can not have any connectivity attributes (%s) updated unless node %s is in a %s state or in maintenance mode. The current state is %s.",
			cur.UUID, "portgroup_id, pxe_enabled, local_link_connection, physical_network", target.UUID,
			strings.Join(connectivityStates, ", "), target.ProvisionState)
	}
	return next, nil
}

// jsonEqual compares two JSON objects by value.
func jsonEqual(a, b map[string]any) bool {
	ra, _ := json.Marshal(orEmpty(a))
	rb, _ := json.Marshal(orEmpty(b))
	return string(ra) == string(rb)
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// listPorts serves GET /ports[/detail], /nodes/{ident}/ports[/detail] and
// /portgroups/{ident}/ports[/detail] (parent "", "node" or "portgroup").
func (h *Handler) listPorts(detailPath bool, parent string) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		v := web.RequestVersion(c)
		q := c.QueryParams()
		if parent == "portgroup" && !v.AtLeast(1, 24) {
			return web.NotFound("The resource could not be found.")
		}
		allowed := []string{"node", "node_uuid", "address", "marker", "limit", "sort_key", "sort_dir",
			"portgroup", "shard"}
		if !detailPath {
			allowed = append(allowed, "fields", "detail")
		}
		if err := node.CheckArgs(c, nil, allowed...); err != nil {
			return apiError(err, nil)
		}
		for _, a := range []string{"node", "portgroup"} {
			if q.Has(a) {
				if err := uuidOrName(a, q.Get(a)); err != nil {
					return err
				}
			}
		}
		if q.Has("node_uuid") {
			if _, err := uuidArg("node_uuid", q.Get("node_uuid")); err != nil {
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
		// check_port_list_policy: the parent first, then the list rules.
		var parentNode *NodeRef
		var parentPG *Portgroup
		switch parent {
		case "node":
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
			parentNode = &n
		case "portgroup":
			ident := pathIdent(c)
			if err := uuidOrName("portgroup", ident); err != nil {
				return err
			}
			g, err := h.store.Portgroup(ctx, ident)
			if err != nil {
				return apiError(err, portgroupNotFound(ident))
			}
			if err := h.checkOn(c, g.NodeOwner, g.NodeLessee, portgroupNotFound(ident), "baremetal:node:get"); err != nil {
				return err
			}
			parentPG = &g
		}
		project, err := node.ListScope(c, h.opts.Rules, "port", nil)
		if err != nil {
			return err
		}
		var fields []string
		if !detailPath {
			if fields, err = web.ParseFields(c); err != nil {
				return err
			}
			if err := checkPortFields(v, fields, nil); err != nil {
				return err
			}
		}
		if err := checkPortFields(v, []string{c.QueryParam("sort_key")}, nil); err != nil {
			return err
		}
		if q.Has("portgroup") && !v.AtLeast(1, 24) {
			return notAcceptable()
		}
		var shards []string
		if q.Has("shard") {
			if !v.AtLeast(1, 82) {
				return web.Errorf(http.StatusNotAcceptable, "Request not acceptable. The minimal required API version should be 1.82")
			}
			shards = []string{}
			for _, s := range strings.Split(q.Get("shard"), ",") {
				if s = strings.ToLower(strings.TrimSpace(s)); s != "" && !slices.Contains(shards, s) {
					shards = append(shards, s)
				}
			}
		}
		if !detailPath {
			if fields, err = web.ReturnFields(c, fields, lp.detail, portDefaultFields); err != nil {
				return err
			}
		}
		nodeIdent := q.Get("node_uuid")
		if nodeIdent == "" {
			nodeIdent = q.Get("node")
			if _, isUUID := web.UUIDLike(nodeIdent); nodeIdent != "" && !isUUID && !v.AtLeast(1, 5) {
				return notAcceptable()
			}
		}
		opts, err := h.pageParams(c, portInvalidSortKeys, PortSortKeys)
		if err != nil {
			return err
		}
		if opts.Marker != nil {
			if _, err := h.store.Port(ctx, *opts.Marker); err != nil {
				return apiError(err, portNotFound(q.Get("marker")))
			}
		}
		pgIdent := q.Get("portgroup")
		if parentNode != nil {
			nodeIdent = parentNode.UUID.String()
		}
		if parentPG != nil {
			pgIdent = parentPG.UUID.String()
		}
		exclusive := 0
		for _, set := range []bool{nodeIdent != "", pgIdent != "", shards != nil} {
			if set {
				exclusive++
			}
		}
		if exclusive > 1 {
			return operationNotPermitted()
		}
		opts.Project = project
		switch {
		case pgIdent != "":
			g, err := h.store.Portgroup(ctx, pgIdent)
			if err != nil {
				return apiError(err, portgroupNotFound(pgIdent))
			}
			opts.PortgroupID = &g.ID
		case nodeIdent != "":
			n, err := h.store.Node(ctx, nodeIdent)
			if err != nil {
				return apiError(err, nodeNotFound(nodeIdent))
			}
			opts.NodeID = &n.ID
		case address != nil:
			opts.Address = address
		case shards != nil:
			opts.Shards = shards
		}
		ports, err := h.store.ListPorts(ctx, opts)
		if err != nil {
			return apiError(err, portNotFound(q.Get("marker")))
		}
		return web.ListAnswer(c, h.base(c), "ports", listResource("ports", detailPath), opts.Limit, ports,
			func(p *Port) (map[string]any, error) { return renderPort(p, v, h.base(c), fields) },
			func(p *Port) string { return p.UUID.String() })
	}
}
