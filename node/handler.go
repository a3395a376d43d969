package node

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// HandlerOptions configures the node API handlers.
type HandlerOptions struct {
	// PublicEndpoint is the base URL used in links and Location headers
	// ("" = scheme://host of each request).
	PublicEndpoint string
	// MaxLimit caps list page sizes and is the default page size
	// (0 = web.DefaultMaxLimit, Ironic's [api]max_limit default of 1000).
	MaxLimit int
	// Driver performs the hardware operations (nil = FakeDriver{}).
	Driver Driver
}

// Handler serves Ironic's node API (/v1/nodes...) on a Store.
type Handler struct {
	store   *Store
	remover AllocationRemover
	opts    HandlerOptions
}

// NewHandler returns a Handler. remover deletes allocations when tearing
// down, deleting or un-associating nodes (nil: plain SQL on the allocations
// table).
func NewHandler(store *Store, remover AllocationRemover, opts HandlerOptions) *Handler {
	if opts.MaxLimit <= 0 {
		opts.MaxLimit = web.DefaultMaxLimit
	}
	if opts.Driver == nil {
		opts.Driver = FakeDriver{}
	}
	return &Handler{store: store, remover: removerOrDefault(remover), opts: opts}
}

// Register mounts the node routes on v1, a group that already negotiates
// the Ironic microversion (web.IronicVersion):
//
//	POST   /nodes                          create (201)
//	GET    /nodes, /nodes/detail           list
//	GET    /nodes/{ident}                  show
//	PATCH  /nodes/{ident}                  update (JSON patch)
//	DELETE /nodes/{ident}                  delete (204)
//	PUT    /nodes/{ident}/maintenance      enter maintenance (202)
//	DELETE /nodes/{ident}/maintenance      leave maintenance (202)
//	GET    /nodes/{ident}/states           states
//	PUT    /nodes/{ident}/states/power     power action (202)
//	PUT    /nodes/{ident}/states/provision provision action (202)
//	GET    /nodes/{ident}/traits           traits (1.37)
//	PUT    /nodes/{ident}/traits           replace traits (204)
//	DELETE /nodes/{ident}/traits           remove all traits (204)
//	PUT    /nodes/{ident}/traits/{trait}   add a trait (204)
//	DELETE /nodes/{ident}/traits/{trait}   remove a trait (204)
func (h *Handler) Register(v1 *echo.Group) {
	v1.POST("/nodes", h.create)
	v1.GET("/nodes", h.list)
	v1.GET("/nodes/detail", h.detail)
	v1.GET("/nodes/:ident", h.get)
	v1.PATCH("/nodes/:ident", h.patch)
	v1.DELETE("/nodes/:ident", h.delete)
	v1.PUT("/nodes/:ident/maintenance", h.setMaintenance)
	v1.DELETE("/nodes/:ident/maintenance", h.clearMaintenance)
	v1.GET("/nodes/:ident/states", h.states)
	v1.PUT("/nodes/:ident/states/power", h.power)
	v1.PUT("/nodes/:ident/states/provision", h.provision)
	v1.GET("/nodes/:ident/traits", h.getTraits)
	v1.PUT("/nodes/:ident/traits", h.setTraits)
	v1.DELETE("/nodes/:ident/traits", h.deleteTraits)
	v1.PUT("/nodes/:ident/traits/:trait", h.addTrait)
	v1.DELETE("/nodes/:ident/traits/:trait", h.deleteTrait)
}

func (h *Handler) base(c echo.Context) string { return web.PublicURL(c, h.opts.PublicEndpoint) }

// ident returns the node identifier of the path, checked as Ironic's
// _lookup and get_rpc_node do: a uuid, or (from 1.5) a valid name.
func (h *Handler) ident(c echo.Context) (string, error) {
	ident := c.Param("ident")
	if u, err := url.PathUnescape(ident); err == nil {
		ident = u
	}
	if isUUIDLike(ident) {
		return ident, nil
	}
	if !isValidLogicalName(ident) {
		return "", web.BadRequest("Expected UUID or name for node: %s", ident)
	}
	v := web.RequestVersion(c)
	if !v.AtLeast(1, 5) {
		return "", web.NotFound("Node %s could not be found.", ident)
	}
	if !validNameAt(v, ident) {
		return "", web.BadRequest("Expected a logical name or UUID but received %s.", ident)
	}
	return ident, nil
}

// readBody decodes the JSON request body (nil when empty).
func readBody(c echo.Context) (any, error) {
	raw, err := io.ReadAll(io.LimitReader(c.Request().Body, 16<<20))
	if err != nil {
		return nil, web.BadRequest("Could not read the request body: %v", err)
	}
	if len(strings.TrimSpace(string(raw))) == 0 {
		return nil, nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, web.BadRequest("The request body is not valid JSON: %v", err)
	}
	return v, nil
}

// readObject decodes a JSON object body (nil when empty).
func readObject(c echo.Context) (map[string]any, error) {
	v, err := readBody(c)
	if err != nil || v == nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, web.BadRequest("Expected a JSON object in the request body, got %s", pyRepr(v))
	}
	return m, nil
}

// --- create ---------------------------------------------------------------

func (h *Handler) create(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.RequestVersion(c)
	if err := loadSchemas(); err != nil {
		return err
	}
	if err := checkArgs(c, nil); err != nil {
		return apiError(err, "")
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
	if cu, ok := doc["chassis_uuid"].(string); ok && cu != "" {
		return Node{}, invalidf("Chassis %s could not be found.", cu)
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
	return n, nil
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

// parseFields reads `fields` as args.string_list (lower-cased, deduplicated)
// and checks it against the request's microversion: 406 below 1.8 or for a
// field newer than the request, 400 for a field nodes do not have.
func parseFields(c echo.Context, v web.Version) ([]string, error) {
	raw, ok := c.QueryParams()["fields"]
	if !ok {
		return nil, nil
	}
	var fields []string
	for _, f := range strings.Split(strings.Join(raw, ","), ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f != "" && !slices.Contains(fields, f) {
			fields = append(fields, f)
		}
	}
	if !v.AtLeast(1, 8) {
		return nil, notAcceptable()
	}
	for _, f := range fields {
		if af, ok := apiFields[f]; ok && !v.AtLeast(1, af.minor) {
			return nil, notAcceptable()
		}
	}
	for _, f := range fields {
		if !queryableFields[f] {
			return nil, invalidf("Field %s is not a valid field.", f)
		}
	}
	if fields == nil {
		fields = []string{}
	}
	return fields, nil
}

func (h *Handler) get(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.RequestVersion(c)
	ident, err := h.ident(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, nil, "fields"); err != nil {
		return apiError(err, ident)
	}
	n, err := h.store.Get(ctx, ident)
	if err != nil {
		return apiError(err, ident)
	}
	fields, err := parseFields(c, v)
	if err != nil {
		return apiError(err, ident)
	}
	r, err := h.store.newRenderer(ctx, v, h.base(c), fields)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r.node(&n, fields))
}

func (h *Handler) list(c echo.Context) error   { return h.listNodes(c, false) }
func (h *Handler) detail(c echo.Context) error { return h.listNodes(c, true) }

// listArgs are the query parameters of GET /v1/nodes; /detail takes the
// same without fields and detail.
var listArgs = []string{"chassis_uuid", "instance_uuid", "associated", "maintenance", "retired",
	"provision_state", "marker", "limit", "sort_key", "sort_dir", "driver", "fields",
	"resource_class", "fault", "conductor_group", "detail", "conductor", "owner",
	"description_contains", "lessee", "project", "shard", "sharded"}

// invalidSortKeys are fields Ironic refuses to sort by.
var invalidSortKeys = []string{"properties", "driver_info", "extra", "instance_info", "driver_internal_info",
	"clean_step", "deploy_step", "raid_config", "target_raid_config", "traits", "network_data"}

func (h *Handler) listNodes(c echo.Context, detailPath bool) error {
	ctx := c.Request().Context()
	v := web.RequestVersion(c)
	q := c.QueryParams()
	allowed := listArgs
	if detailPath {
		allowed = slices.DeleteFunc(slices.Clone(listArgs), func(s string) bool { return s == "fields" || s == "detail" })
	}
	if err := checkArgs(c, nil, allowed...); err != nil {
		return apiError(err, "")
	}
	opts, detail, err := h.listOptions(c, v)
	if err != nil {
		return apiError(err, "")
	}
	var fields []string
	if !detailPath {
		if fields, err = parseFields(c, v); err != nil {
			return apiError(err, "")
		}
		if detail != nil && !v.AtLeast(1, 43) {
			return web.BadRequest("Invalid query parameter ?detail=%s received.", q.Get("detail"))
		}
		if fields != nil && detail != nil && *detail {
			return web.BadRequest("Can not specify ?detail=True and fields in the same request.")
		}
		if fields == nil && (detail == nil || !*detail) {
			fields = listDefaultFields
		}
	}
	lp, err := web.ParseListParams(c, h.opts.MaxLimit)
	if err != nil {
		return err
	}
	opts.Limit = lp.Limit
	opts.SortDesc = lp.SortDesc
	opts.SortKey = lp.SortKey
	if af, ok := apiFields[opts.SortKey]; ok && !v.AtLeast(1, af.minor) {
		return apiError(notAcceptable(), "")
	}
	if slices.Contains(invalidSortKeys, opts.SortKey) {
		return web.BadRequest("The sort_key value %s is an invalid field for sorting", opts.SortKey)
	}
	if _, ok := SortKeys[opts.SortKey]; !ok {
		return web.BadRequest("The sort_key value \"%s\" is an invalid field for sorting", opts.SortKey)
	}
	if lp.Marker != "" {
		u, err := parseUUIDArg("marker", lp.Marker)
		if err != nil {
			return apiError(err, "")
		}
		opts.Marker = &u
	}
	if q.Has("chassis_uuid") {
		return web.NotFound("Chassis %s could not be found.", q.Get("chassis_uuid"))
	}
	nodes, err := h.store.List(ctx, opts)
	if err != nil {
		marker := ""
		if opts.Marker != nil {
			marker = q.Get("marker")
		}
		return apiError(err, marker)
	}
	if conductor := q.Get("conductor"); q.Has("conductor") {
		// Ironic filters by conductor after the query, as the mapping is
		// computed, not stored.
		r, err := h.store.newRenderer(ctx, v, h.base(c), []string{"conductor"})
		if err != nil {
			return err
		}
		nodes = slices.DeleteFunc(nodes, func(n Node) bool { return r.conductorFor(&n) != conductor })
	}
	r, err := h.store.newRenderer(ctx, v, h.base(c), fields)
	if err != nil {
		return err
	}
	items := make([]map[string]any, len(nodes))
	for i := range nodes {
		items[i] = r.node(&nodes[i], fields)
	}
	resp := map[string]any{"nodes": items}
	if opts.InstanceUUID == nil && len(nodes) > 0 {
		keep := url.Values{}
		for k, vs := range q {
			if k != "limit" && k != "marker" {
				keep[k] = vs
			}
		}
		resource := "nodes"
		if detailPath {
			resource = "nodes/detail"
		}
		if next := web.NextLink(h.base(c), resource, len(nodes), opts.Limit, nodes[len(nodes)-1].UUID.String(), keep); next != "" {
			resp["next"] = next
		}
	}
	return c.JSON(http.StatusOK, resp)
}

// listOptions reads the list filters with Ironic's checks, in its order:
// argument types first, then the microversion each filter needs.
func (h *Handler) listOptions(c echo.Context, v web.Version) (ListOptions, *bool, error) {
	q := c.QueryParams()
	var opts ListOptions
	boolArg := func(name string) (*bool, error) {
		if !q.Has(name) {
			return nil, nil
		}
		b, err := parseBool(name, q.Get(name))
		if err != nil {
			return nil, err
		}
		return &b, nil
	}
	strArg := func(name string) *string {
		if !q.Has(name) {
			return nil
		}
		s := q.Get(name)
		return &s
	}
	var err error
	if q.Has("limit") {
		if _, err := strconv.Atoi(strings.TrimSpace(q.Get("limit"))); err != nil {
			return opts, nil, invalidf("Expected an integer for limit: %s", q.Get("limit"))
		}
	}
	if q.Has("chassis_uuid") {
		if _, err := parseUUIDArg("chassis_uuid", q.Get("chassis_uuid")); err != nil {
			return opts, nil, err
		}
	}
	if q.Has("instance_uuid") {
		u, err := parseUUIDArg("instance_uuid", q.Get("instance_uuid"))
		if err != nil {
			return opts, nil, err
		}
		opts.InstanceUUID = &u
	}
	if opts.Associated, err = boolArg("associated"); err != nil {
		return opts, nil, err
	}
	if opts.Maintenance, err = boolArg("maintenance"); err != nil {
		return opts, nil, err
	}
	if opts.Retired, err = boolArg("retired"); err != nil {
		return opts, nil, err
	}
	detail, err := boolArg("detail")
	if err != nil {
		return opts, nil, err
	}
	if opts.Sharded, err = boolArg("sharded"); err != nil {
		return opts, nil, err
	}
	opts.ProvisionState = strArg("provision_state")
	opts.Driver = strArg("driver")
	opts.ResourceClass = strArg("resource_class")
	opts.Fault = strArg("fault")
	opts.ConductorGroup = strArg("conductor_group")
	opts.Owner = strArg("owner")
	opts.Lessee = strArg("lessee")
	opts.Project = strArg("project")
	opts.DescriptionContains = strArg("description_contains")
	if q.Has("shard") {
		opts.Shards = []string{}
		for _, s := range strings.Split(q.Get("shard"), ",") {
			if s = strings.ToLower(strings.TrimSpace(s)); s != "" && !slices.Contains(opts.Shards, s) {
				opts.Shards = append(opts.Shards, s)
			}
		}
	}

	if opts.ProvisionState != nil {
		if !v.AtLeast(1, 9) {
			return opts, nil, notAcceptable()
		}
		if !slices.Contains(States, *opts.ProvisionState) {
			return opts, nil, invalidf("Provision state \"%s\" is not valid", *opts.ProvisionState)
		}
	}
	gates := []struct {
		set   bool
		minor int
	}{
		{opts.Driver != nil, 16}, {opts.ResourceClass != nil, 21}, {opts.Fault != nil, 42},
		{opts.ConductorGroup != nil, 46}, {q.Has("conductor"), 49}, {opts.Owner != nil, 50},
		{opts.Lessee != nil, 65}, {opts.Shards != nil, 82}, {opts.Sharded != nil, 82},
	}
	for _, g := range gates {
		if g.set {
			if err := minVersion(v, g.minor); err != nil {
				return opts, nil, err
			}
		}
	}
	if opts.Fault != nil && !slices.Contains(validFaults, *opts.Fault) {
		return opts, nil, invalidf("Unrecognized fault \"%s\" is specified, allowed faults are %s",
			*opts.Fault, pyTuple(validFaults))
	}
	return opts, detail, nil
}

// --- update ---------------------------------------------------------------

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
	if err := validateSchema(patchSchema, "patch", body); err != nil {
		return apiError(err, ident)
	}
	var ops []patchOp
	for _, item := range body.([]any) {
		m := item.(map[string]any)
		op := patchOp{Op: m["op"].(string), Path: m["path"].(string), Value: m["value"], raw: m}
		ops = append(ops, op)
	}
	for _, op := range ops {
		if _, ok := op.raw["value"]; !ok && op.Op != "remove" {
			return apiError(invalidf("Couldn't apply patch '%s'. Reason: The operation does not contain a 'value' member",
				pyRepr(op.raw)), ident)
		}
	}
	// _validate_patch
	for _, op := range ops {
		root := strings.Split(op.Path, "/")[1]
		if !slices.Contains(patchAllowedFields, root) {
			return apiError(invalidf("Cannot patch %s. Only the following can be updated: %s",
				op.Path, strings.Join(patchAllowedFields, ", ")), ident)
		}
	}
	for f := range apiFields {
		if !fieldAllowed(f, v) && len(patchValues(ops, "/"+f)) > 0 {
			return apiError(notAcceptable(), ident)
		}
	}
	if reset && len(patchValues(ops, "/driver")) == 0 {
		return web.BadRequest("The reset_interfaces parameter can only be used when changing the node's driver.")
	}
	if d := patchValues(ops, "/description"); len(d) > 0 {
		if s, ok := d[0].(string); ok && len([]rune(s)) > MaxDescriptionLength {
			return web.BadRequest("Cannot update node with description exceeding %d characters", MaxDescriptionLength)
		}
	}
	onlyRemoveInstance := len(ops) == 1 && ops[0].Op == "remove" && ops[0].Path == "/instance_uuid" && len(ops[0].raw) == 2

	n, err := h.store.Update(ctx, ident, h.opts.Driver, h.remover, func(n *Node) error {
		if n.Maintenance && onlyRemoveInstance {
			// Ironic lets this through whatever the state, to recover
			// nodes from broken deployments.
		} else if n.TargetProvisionState != nil && !slices.Contains(UpdateAllowedStates, n.ProvisionState) {
			return conflictf("Node %s can not be updated while a state transition is in progress.", ident)
		} else if n.ProvisionState == StateInspecting && v.AtLeast(1, 39) {
			return conflictf("Cannot update node \"%s\" while it is in state \"%s\".", n.UUID, StateInspecting)
		}
		for _, name := range patchValues(ops, "/name") {
			if err := checkNodeName(v, name, "Node "+ident+": Cannot change name to invalid name '%s'"); err != nil {
				return err
			}
		}
		doc := patchDocument(n)
		patched, err := applyPatch(doc, ops)
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
		if cu, ok := patched["chassis_uuid"].(string); ok && cu != "" {
			return invalidf("Chassis %s could not be found.", cu)
		}
		return applyPatched(n, patched, ops, reset)
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
		"chassis_uuid":     nil,
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
	n.Driver, _ = patched["driver"].(string)
	n.Protected, _ = patched["protected"].(bool)
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

func (h *Handler) setMaintenance(c echo.Context) error {
	ident, err := h.ident(c)
	if err != nil {
		return err
	}
	body, err := readObject(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, body, "reason"); err != nil {
		return apiError(err, ident)
	}
	var reason *string
	if v, ok := body["reason"]; ok && v != nil {
		s, ok := v.(string)
		if !ok {
			return web.BadRequest("Expected string for reason: %s", pyReprPlain(v))
		}
		reason = &s
	} else if q := c.QueryParams(); q.Has("reason") {
		s := q.Get("reason")
		reason = &s
	}
	if _, err := h.store.SetMaintenance(c.Request().Context(), ident, true, reason); err != nil {
		return apiError(err, ident)
	}
	return c.NoContent(http.StatusAccepted)
}

func (h *Handler) clearMaintenance(c echo.Context) error {
	ident, err := h.ident(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, nil); err != nil {
		return apiError(err, ident)
	}
	if _, err := h.store.SetMaintenance(c.Request().Context(), ident, false, nil); err != nil {
		return apiError(err, ident)
	}
	return c.NoContent(http.StatusAccepted)
}

// --- states ---------------------------------------------------------------

func (h *Handler) states(c echo.Context) error {
	ctx := c.Request().Context()
	ident, err := h.ident(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, nil); err != nil {
		return apiError(err, ident)
	}
	n, err := h.store.Get(ctx, ident)
	if err != nil {
		return apiError(err, ident)
	}
	r := &renderer{v: web.RequestVersion(c), base: h.base(c)}
	return c.JSON(http.StatusOK, r.states(&n))
}

func (h *Handler) statesLocation(c echo.Context, ident string) {
	c.Response().Header().Set(echo.HeaderLocation, h.base(c)+"/v1/nodes/"+ident+"/states")
}

func (h *Handler) power(c echo.Context) error {
	v := web.RequestVersion(c)
	ident, err := h.ident(c)
	if err != nil {
		return err
	}
	body, err := readObject(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, body, "target", "timeout"); err != nil {
		return apiError(err, ident)
	}
	target, ok := body["target"]
	if !ok || target == nil {
		return web.BadRequest("Missing mandatory parameter: target")
	}
	t, ok := target.(string)
	if !ok {
		return web.BadRequest("Expected string for target: %s", pyReprPlain(target))
	}
	var timeout *int
	if tv, ok := body["timeout"]; ok && tv != nil {
		i, ok := asInt(tv)
		if !ok {
			return web.BadRequest("Expected an integer for timeout: %s", pyReprPlain(tv))
		}
		timeout = &i
	}
	if (t == SoftRebooting || t == SoftPowerOff || (timeout != nil && *timeout != 0)) && !v.AtLeast(1, 27) {
		return apiError(notAcceptable(), ident)
	}
	if timeout != nil && *timeout < 1 {
		return web.BadRequest("timeout has to be positive integer")
	}
	if _, err := h.store.SetPowerState(c.Request().Context(), ident, t, h.opts.Driver); err != nil {
		return apiError(err, ident)
	}
	h.statesLocation(c, ident)
	return c.NoContent(http.StatusAccepted)
}

// asInt converts a JSON number or numeric string to an int (args.integer).
func asInt(v any) (int, bool) {
	switch x := v.(type) {
	case float64:
		if x == float64(int(x)) {
			return int(x), true
		}
	case json.Number:
		i, err := x.Int64()
		return int(i), err == nil
	case string:
		if i, err := strconv.Atoi(strings.TrimSpace(x)); err == nil {
			return i, true
		}
	}
	return 0, false
}

// minVerbVersions are the microversions provision targets need
// (utils.MIN_VERB_VERSIONS, keyed as Ironic looks them up: by target).
var minVerbVersions = map[string]int{
	TargetManage: 4, TargetProvide: 4, TargetInspect: 6, TargetAbort: 13, TargetClean: 15,
	TargetAdopt: 17, TargetRescue: 38, TargetUnrescue: 38, TargetDeploy: 73, "delete": 73,
}

// b64Alphabet is what a base64 config drive may contain.
const b64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\n\r\t "

func (h *Handler) provision(c echo.Context) error {
	v := web.RequestVersion(c)
	ident, err := h.ident(c)
	if err != nil {
		return err
	}
	body, err := readObject(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, body, "target", "configdrive", "clean_steps", "deploy_steps",
		"rescue_password", "disable_ramdisk"); err != nil {
		return apiError(err, ident)
	}
	target, ok := body["target"]
	if !ok || target == nil {
		return web.BadRequest("Missing mandatory parameter: target")
	}
	req := ProvisionRequest{}
	if req.Target, ok = target.(string); !ok {
		return web.BadRequest("Expected string for target: %s", pyReprPlain(target))
	}
	if cd, ok := body["configdrive"]; ok && cd != nil {
		switch cd.(type) {
		case string, map[string]any:
			req.ConfigDrive = cd
		default:
			return web.BadRequest("Expected types <class 'NoneType'>, <class 'dict'>, <class 'str'> for configdrive: %s", pyReprPlain(cd))
		}
	}
	for _, k := range []string{"clean_steps", "deploy_steps"} {
		if s, ok := body[k]; ok && s != nil {
			l, ok := s.([]any)
			if !ok {
				return web.BadRequest("Expected types <class 'NoneType'>, <class 'list'> for %s: %s", k, pyReprPlain(s))
			}
			if k == "clean_steps" {
				req.CleanSteps = l
			} else {
				req.DeploySteps = l
			}
		}
	}
	if rp, ok := body["rescue_password"]; ok && rp != nil {
		s, ok := rp.(string)
		if !ok {
			return web.BadRequest("Expected string for rescue_password: %s", pyReprPlain(rp))
		}
		req.RescuePassword = &s
	}
	if dr, ok := body["disable_ramdisk"]; ok && dr != nil {
		b, err := parseBool("disable_ramdisk", dr)
		if err != nil {
			return apiError(err, ident)
		}
		req.DisableRamdisk = &b
	}

	if minor, ok := minVerbVersions[req.Target]; ok && !v.AtLeast(1, minor) {
		return apiError(notAcceptable(), ident)
	}
	if err := checkConfigDrive(v, req.Target, req.ConfigDrive); err != nil {
		return apiError(err, ident)
	}
	if len(req.DeploySteps) > 0 {
		if err := minVersion(v, 69); err != nil {
			return apiError(err, ident)
		}
	}
	if req.DisableRamdisk != nil && !v.AtLeast(1, 70) {
		return web.Errorf(http.StatusNotAcceptable, "disable_ramdisk is not acceptable in this API version")
	}
	if _, err := h.store.Provision(c.Request().Context(), ident, req, h.opts.Driver, h.remover); err != nil {
		return apiError(err, ident)
	}
	h.statesLocation(c, ident)
	return c.NoContent(http.StatusAccepted)
}

// checkConfigDrive is utils.check_allow_configdrive.
func checkConfigDrive(v web.Version, target string, cd any) error {
	if isEmptyValue(cd) {
		return nil
	}
	allowed := []string{TargetActive}
	if v.AtLeast(1, 35) {
		allowed = append(allowed, TargetRebuild)
	}
	if !slices.Contains(allowed, target) {
		return invalidf("Adding a config drive is only supported when setting provision state to %s", strings.Join(allowed, ", "))
	}
	switch x := cd.(type) {
	case map[string]any:
		if !v.AtLeast(1, 56) {
			return invalidf("Providing a JSON object for configdrive is only supported starting with API version 1.56")
		}
		for k, val := range x {
			switch k {
			case "meta_data", "network_data", "vendor_data":
				if _, ok := val.(map[string]any); !ok {
					return invalidf("Invalid configdrive format: %s is not of type 'object'", pyRepr(val))
				}
			case "user_data":
			default:
				return invalidf("Invalid configdrive format: Additional properties are not allowed (%s was unexpected)", pyStr(k))
			}
		}
		if _, ok := x["vendor_data"]; ok && !v.AtLeast(1, 59) {
			return invalidf("Providing vendor_data in configdrive is only supported starting with API version 1.59")
		}
	case string:
		if strings.Contains(x, "://") {
			return nil
		}
		for _, r := range x {
			if !strings.ContainsRune(b64Alphabet, r) {
				return invalidf("Invalid configdrive format: it is neither a JSON, nor a URL, nor a base64 string")
			}
		}
	}
	return nil
}

// --- traits ---------------------------------------------------------------

// traitsIdent is ident for the traits endpoints, which exist from 1.37.
// Below it a request gets what Ironic's routing gives it without the
// sub-controller: 406 for GET, 405 for PUT, 404 for DELETE.
func (h *Handler) traitsIdent(c echo.Context) (string, error) {
	if !web.RequestVersion(c).AtLeast(1, 37) {
		switch c.Request().Method {
		case http.MethodGet:
			return "", web.Errorf(http.StatusNotAcceptable, "Request not acceptable.")
		case http.MethodPut:
			return "", web.Errorf(http.StatusMethodNotAllowed, "The method is not allowed for the requested URL.")
		}
		return "", web.NotFound("Resource could not be found.")
	}
	return h.ident(c)
}

func (h *Handler) getTraits(c echo.Context) error {
	ident, err := h.traitsIdent(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, nil); err != nil {
		return apiError(err, ident)
	}
	traits, err := h.store.Traits(c.Request().Context(), ident)
	if err != nil {
		return apiError(err, ident)
	}
	return c.JSON(http.StatusOK, map[string]any{"traits": traits})
}

const traitsUsage = "A single node trait may be added via PUT /v1/nodes/<node identifier>/traits/<trait> with no body, " +
	"or all node traits may be replaced via PUT /v1/nodes/<node identifier>/traits with the list of traits " +
	"specified in the request body."

// traitsBody validates a traits PUT body as TRAITS_SCHEMA and returns the
// traits list (nil when the body has none).
func traitsBody(body any) ([]string, bool, error) {
	if body == nil {
		return nil, false, nil
	}
	m, ok := body.(map[string]any)
	if !ok {
		return nil, false, invalidf("Schema error for body: %s is not of type 'object'", pyRepr(body))
	}
	for k := range m {
		if k != "traits" {
			return nil, false, invalidf("Schema error for body: Additional properties are not allowed (%s was unexpected)", pyStr(k))
		}
	}
	raw, ok := m["traits"]
	if !ok {
		return nil, false, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, false, invalidf("Schema error for body: %s is not of type 'array'", pyRepr(raw))
	}
	traits := make([]string, 0, len(list))
	for _, t := range list {
		s, ok := t.(string)
		if !ok {
			return nil, false, invalidf("Schema error for body: %s is not of type 'string'", pyRepr(t))
		}
		if err := checkTraitAs("body", s); err != nil {
			return nil, false, err
		}
		traits = append(traits, s)
	}
	return traits, true, nil
}

func (h *Handler) setTraits(c echo.Context) error {
	ident, err := h.traitsIdent(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, nil); err != nil {
		return apiError(err, ident)
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	traits, present, err := traitsBody(body)
	if err != nil {
		return apiError(err, ident)
	}
	if !present {
		return web.BadRequest("%s", traitsUsage)
	}
	if _, err := h.store.SetTraits(c.Request().Context(), ident, traits); err != nil {
		return apiError(err, ident)
	}
	return c.NoContent(http.StatusNoContent)
}

func (h *Handler) addTrait(c echo.Context) error {
	ident, err := h.traitsIdent(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, nil); err != nil {
		return apiError(err, ident)
	}
	name := c.Param("trait")
	if u, err := url.PathUnescape(name); err == nil {
		name = u
	}
	if err := checkTrait(name); err != nil {
		return apiError(err, ident)
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	_, present, err := traitsBody(body)
	if err != nil {
		return apiError(err, ident)
	}
	if present {
		return web.BadRequest("%s", traitsUsage)
	}
	if !isEmptyValue(body) {
		return web.BadRequest("No body should be provided when adding a trait")
	}
	if _, err := h.store.AddTrait(c.Request().Context(), ident, name); err != nil {
		return apiError(err, ident)
	}
	c.Response().Header().Set(echo.HeaderLocation, h.base(c)+"/v1/nodes/"+ident+"/traits/"+name)
	return c.NoContent(http.StatusNoContent)
}

func (h *Handler) deleteTrait(c echo.Context) error {
	ident, err := h.traitsIdent(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, nil); err != nil {
		return apiError(err, ident)
	}
	name := c.Param("trait")
	if u, err := url.PathUnescape(name); err == nil {
		name = u
	}
	if _, err := h.store.RemoveTrait(c.Request().Context(), ident, name); err != nil {
		return apiError(err, ident)
	}
	return c.NoContent(http.StatusNoContent)
}

func (h *Handler) deleteTraits(c echo.Context) error {
	ident, err := h.traitsIdent(c)
	if err != nil {
		return err
	}
	if err := checkArgs(c, nil); err != nil {
		return apiError(err, ident)
	}
	if _, err := h.store.RemoveAllTraits(c.Request().Context(), ident); err != nil {
		return apiError(err, ident)
	}
	return c.NoContent(http.StatusNoContent)
}
