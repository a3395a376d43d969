package node

import (
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/web"
)

func (h *Handler) create(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.RequestVersion(c)
	if err := loadSchemas(); err != nil {
		return err
	}
	if err := checkArgs(c, nil); err != nil {
		return apiError(err, "")
	}
	if creds := auth.Caller(ctx); !h.opts.Rules.Allowed("baremetal:node:create", auth.Target(creds), creds) {
		return Forbidden("baremetal:node:create")
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if err := validateSchema(createSchema, "node", body); err != nil {
		return apiError(err, "")
	}
	doc := body.(map[string]any)
	n, err := nodeFromCreate(v, doc)
	if err != nil {
		return apiError(err, "")
	}
	if err := h.opts.Driver.Validate(ctx, &n); err != nil {
		return apiError(err, "")
	}
	created, err := h.store.Create(ctx, n)
	if err != nil {
		return apiError(err, n.UUID.String())
	}
	r, err := h.store.newRenderer(ctx, v, h.base(c), nil)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, h.base(c)+"/v1/nodes/"+created.UUID.String())
	return c.JSON(http.StatusCreated, r.node(&created, nil))
}

// boolFields and uuidFields get the extra checks Ironic runs after the
// schema (NODE_VALIDATE_EXTRA).
var (
	boolFields = []string{"automated_clean", "console_enabled", "maintenance", "protected", "retired"}
	uuidFields = []string{"chassis_uuid", "instance_uuid", "uuid"}
)

// validateExtra converts boolean strings and checks uuids in doc in place.
func validateExtra(doc map[string]any) error {
	for _, f := range boolFields {
		if v, ok := doc[f]; ok && v != nil {
			b, err := parseBool(f, v)
			if err != nil {
				return err
			}
			doc[f] = b
		}
	}
	for _, f := range uuidFields {
		if v, ok := doc[f]; ok && v != nil {
			if _, err := parseUUIDArg(f, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// nodeFromCreate checks a schema-valid POST body as Ironic's post() does and
// builds the node to create.
func nodeFromCreate(v web.Version, doc map[string]any) (Node, error) {
	if err := validateExtra(doc); err != nil {
		return Node{}, err
	}
	// reject_fields_in_newer_versions
	for f, val := range doc {
		if fieldAllowed(f, v) || apiFields[f].get == nil {
			continue
		}
		if f == "name" && val == nil {
			continue
		}
		if s, ok := val.(string); val == nil || (ok && s == "" && f == "conductor_group") {
			continue
		}
		return Node{}, notAcceptable()
	}
	if name, ok := doc["name"]; ok && name != nil {
		if err := checkNodeName(v, name, "Cannot create node with invalid name '%s'"); err != nil {
			return Node{}, err
		}
	}
	for _, f := range []string{"boot_mode", "secure_boot"} {
		if val, ok := doc[f]; ok && val != nil {
			return Node{}, invalidf("metalloc does not store %s: it is reported by hardware, which metalloc does not manage", f)
		}
	}
	n := Node{Interfaces: map[string]string{}}
	if s, ok := doc["uuid"].(string); ok {
		n.UUID, _ = uuid.Parse(s)
	}
	n.Driver, _ = doc["driver"].(string)
	n.ProvisionState = StateEnroll
	if !v.AtLeast(1, 11) {
		n.ProvisionState = StateAvailable
	}
	if err := setCommonFields(&n, doc); err != nil {
		return Node{}, err
	}
	if b, ok := doc["console_enabled"].(bool); ok {
		n.ConsoleEnabled = b
	}
	n.ChassisUUID = chassisOf(doc)
	return n, nil
}

// chassisOf is the chassis uuid of a validated document (nil when absent,
// null or empty); the store resolves it to the chassis (400 when there is
// no such chassis, as Ironic's _replace_chassis_uuid_with_id).
func chassisOf(doc map[string]any) *uuid.UUID {
	s, _ := doc["chassis_uuid"].(string)
	if s == "" {
		return nil
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return nil
	}
	return &u
}

// setCommonFields copies the fields POST and PATCH share from a validated
// document into n (absent or null fields become their empty value).
func setCommonFields(n *Node, doc map[string]any) error {
	optStr := func(k string) *string {
		if s, ok := doc[k].(string); ok {
			return &s
		}
		return nil
	}
	obj := func(k string) map[string]any {
		if m, ok := doc[k].(map[string]any); ok {
			return m
		}
		return map[string]any{}
	}
	n.Name = optStr("name")
	n.ResourceClass = optStr("resource_class")
	if n.ResourceClass != nil && *n.ResourceClass == "" {
		n.ResourceClass = nil
	}
	n.Owner = optStr("owner")
	n.Lessee = optStr("lessee")
	n.Description = optStr("description")
	n.Shard = optStr("shard")
	n.RetiredReason = optStr("retired_reason")
	n.ConductorGroup = deref(optStr("conductor_group"))
	if !conductorGroupRE.MatchString(n.ConductorGroup) {
		return invalidf("Expected a conductor group but received %s.", n.ConductorGroup)
	}
	n.ConductorGroup = strings.ToLower(n.ConductorGroup)
	n.Properties = obj("properties")
	n.Extra = obj("extra")
	n.InstanceInfo = obj("instance_info")
	n.DriverInfo = obj("driver_info")
	n.NetworkData = obj("network_data")
	n.AutomatedClean = nil
	if b, ok := doc["automated_clean"].(bool); ok {
		n.AutomatedClean = &b
	}
	n.Maintenance, _ = doc["maintenance"].(bool)
	n.Retired, _ = doc["retired"].(bool)
	n.InstanceUUID = nil
	if s, ok := doc["instance_uuid"].(string); ok {
		u, _ := uuid.Parse(s)
		n.InstanceUUID = &u
	}
	if n.Interfaces == nil {
		n.Interfaces = map[string]string{}
	}
	for _, f := range InterfaceFields {
		if s, ok := doc[f].(string); ok && s != "" {
			n.Interfaces[f] = s
		} else {
			delete(n.Interfaces, f)
		}
	}
	return nil
}

// --- show and list --------------------------------------------------------
