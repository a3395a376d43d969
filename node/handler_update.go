package node

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// patchAllowedFields are the node fields a PATCH may touch (Ironic's
// PATCH_ALLOWED_FIELDS); everything else is read-only.
var patchAllowedFields = []string{
	"automated_clean", "bios_interface", "boot_interface", "chassis_uuid", "conductor_group",
	"console_interface", "deploy_interface", "description", "driver", "driver_info", "extra",
	"inspect_interface", "instance_info", "instance_uuid", "lessee", "maintenance",
	"management_interface", "name", "network_data", "network_interface", "owner",
	"power_interface", "properties", "protected", "protected_reason", "raid_interface",
	"rescue_interface", "resource_class", "retired", "retired_reason", "shard",
	"storage_interface", "vendor_interface",
}

// patchOp is one operation of a validated JSON patch.
type patchOp struct {
	Op    string
	Path  string
	Value any
	raw   map[string]any
}

// patchValues is api_utils.get_patch_values: the values of the non-remove
// operations on exactly path.
func patchValues(ops []patchOp, path string) []any {
	var out []any
	for _, op := range ops {
		if op.Path == path && op.Op != "remove" {
			out = append(out, op.Value)
		}
	}
	return out
}

func (h *Handler) patch(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.RequestVersion(c)
	if err := loadSchemas(); err != nil {
		return err
	}
	ident, err := h.ident(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, nil, "reset_interfaces"); err != nil {
		return apiError(err, ident)
	}
	var reset bool
	if q := c.QueryParams(); q.Has("reset_interfaces") {
		if reset, err = parseBool("reset_interfaces", q.Get("reset_interfaces")); err != nil {
			return apiError(err, ident)
		}
		if !v.AtLeast(1, 45) {
			return apiError(notAcceptable(), ident)
		}
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	ops, err := decodePatchOps(body, v, reset)
	if err != nil {
		return apiError(err, ident)
	}
	onlyRemoveInstance := len(ops) == 1 && ops[0].Op == "remove" && ops[0].Path == "/instance_uuid" && len(ops[0].raw) == 2

	paths := make([]string, len(ops))
	for i, op := range ops {
		paths[i] = op.Path
	}
	n, err := h.store.Update(ctx, ident, h.opts.Driver, h.remover, func(n *Node) error {
		if err := CheckNode(c, h.opts.Rules, n.Owner, n.Lessee, ident, patchRules(paths)...); err != nil {
			return err
		}
		if n.Maintenance && onlyRemoveInstance {
			// Ironic lets this through whatever the state, to recover
			// nodes from broken deployments.
		} else if n.TargetProvisionState != nil && !slices.Contains(UpdateAllowedStates, n.ProvisionState) {
			return conflictf("Node %s can not be updated while a state transition is in progress.", ident)
		} else if n.ProvisionState == StateInspecting && v.AtLeast(1, 39) {
			return conflictf("Cannot update node \"%s\" while it is in state \"%s\".", n.UUID, StateInspecting)
		}
		return patchNode(ctx, n, v, ident, ops, reset)
	})
	if err != nil {
		return apiError(err, ident)
	}
	r, err := h.store.newRenderer(ctx, v, h.base(c), nil)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r.node(&n, nil))
}

// patchDocument is the document a JSON patch applies to: every patchable
// field with its stored (unmasked) value, as Ironic patches node.as_dict().
func patchDocument(n *Node) map[string]any {
	doc := map[string]any{
		"automated_clean":  boolOrNil(n.AutomatedClean),
		"chassis_uuid":     uuidOrNil(n.ChassisUUID),
		"conductor_group":  n.ConductorGroup,
		"description":      str(n.Description),
		"driver":           n.Driver,
		"driver_info":      cloneObject(orEmpty(n.DriverInfo)),
		"extra":            cloneObject(orEmpty(n.Extra)),
		"instance_info":    cloneObject(orEmpty(n.InstanceInfo)),
		"instance_uuid":    uuidOrNil(n.InstanceUUID),
		"lessee":           str(n.Lessee),
		"maintenance":      n.Maintenance,
		"name":             str(n.Name),
		"network_data":     cloneObject(orEmpty(n.NetworkData)),
		"owner":            str(n.Owner),
		"properties":       cloneObject(orEmpty(n.Properties)),
		"protected":        n.Protected,
		"protected_reason": str(n.ProtectedReason),
		"resource_class":   str(n.ResourceClass),
		"retired":          n.Retired,
		"retired_reason":   str(n.RetiredReason),
		"shard":            str(n.Shard),
		"reservable":       n.Reservable,
	}
	for _, f := range InterfaceFields {
		if s, ok := n.Interfaces[f]; ok && s != "" {
			doc[f] = s
		} else {
			doc[f] = nil
		}
	}
	return doc
}

// applyPatched copies a patched, validated document back into n, as
// _update_changed_fields does.
func applyPatched(n *Node, patched map[string]any, ops []patchOp, reset bool) error {
	oldDriver := n.Driver
	if err := setCommonFields(n, patched); err != nil {
		return err
	}
	n.ChassisUUID = chassisOf(patched)
	n.Driver, _ = patched["driver"].(string)
	n.Protected, _ = patched["protected"].(bool)
	n.Reservable, _ = patched["reservable"].(bool)
	if s, ok := patched["protected_reason"].(string); ok {
		n.ProtectedReason = &s
	} else {
		n.ProtectedReason = nil
	}
	if reset && n.Driver != oldDriver {
		for _, f := range InterfaceFields {
			touched := false
			for _, op := range ops {
				if op.Path == "/"+f || strings.HasPrefix(op.Path, "/"+f+"/") {
					touched = true
				}
			}
			if !touched {
				delete(n.Interfaces, f)
			}
		}
	}
	return nil
}

// --- delete ---------------------------------------------------------------

func (h *Handler) delete(c echo.Context) error {
	ident, err := h.ident(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, nil); err != nil {
		return apiError(err, ident)
	}
	if err := h.store.Delete(c.Request().Context(), ident, h.remover); err != nil {
		return apiError(err, ident)
	}
	return c.NoContent(http.StatusNoContent)
}

// --- maintenance ----------------------------------------------------------

// decodePatchOps checks a PATCH body (decoded JSON) against
// schema/patch.json and Ironic's _validate_patch: every operation has a
// value (but remove), patches a patchable field that exists at version v,
// reset_interfaces only with a driver change, a description within
// MaxDescriptionLength. Errors are Ironic's 400 or 406.
func decodePatchOps(body any, v web.Version, reset bool) ([]patchOp, error) {
	ops, err := DecodePatch(body)
	if err != nil {
		return nil, err
	}
	// _validate_patch
	for _, op := range ops {
		root := strings.Split(op.Path, "/")[1]
		// reservable (metalloc's, leases) is patchable but left out of
		// the list, which is Ironic's message.
		if root != "reservable" && !slices.Contains(patchAllowedFields, root) {
			return nil, invalidf("Cannot patch %s. Only the following can be updated: %s",
				op.Path, strings.Join(patchAllowedFields, ", "))
		}
	}
	for f := range apiFields {
		if !fieldAllowed(f, v) && len(patchValues(ops, "/"+f)) > 0 {
			return nil, notAcceptable()
		}
	}
	if reset && len(patchValues(ops, "/driver")) == 0 {
		return nil, web.BadRequest("The reset_interfaces parameter can only be used when changing the node's driver.")
	}
	if d := patchValues(ops, "/description"); len(d) > 0 {
		if s, ok := d[0].(string); ok && len([]rune(s)) > MaxDescriptionLength {
			return nil, web.BadRequest("Cannot update node with description exceeding %d characters", MaxDescriptionLength)
		}
	}
	return ops, nil
}

// patchNode applies ops to n (locked by the caller, who checked access and
// state): names valid at v, the patched document valid against the node
// schema and extra's limits, then copied back (applyPatched). ident names
// the node in messages.
func patchNode(ctx context.Context, n *Node, v web.Version, ident string, ops []patchOp, reset bool) error {
	for _, name := range patchValues(ops, "/name") {
		if err := checkNodeName(v, name, "Node "+ident+": Cannot change name to invalid name '%s'"); err != nil {
			return err
		}
	}
	doc := patchDocument(n)
	patched, err := applyPatch(ctx, doc, ops)
	if err != nil {
		return err
	}
	for k := range patched {
		if !nodeSchemaProps[k] {
			delete(patched, k)
		}
	}
	if err := validateSchema(patchedNodeSchema, "patch", patched); err != nil {
		return err
	}
	if err := validateExtra(patched); err != nil {
		return err
	}
	if n.ChassisUUID != nil && (patched["chassis_uuid"] == nil || patched["chassis_uuid"] == "") && !v.AtLeast(1, 25) {
		return notAcceptable()
	}
	return applyPatched(n, patched, ops, reset)
}
