package node

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

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

// chassisList is GET /chassis/{uuid}/nodes[/detail]: the node list of the
// chassis the path names (Ironic's NodesController with from_chassis).
func (h *Handler) chassisList(detailPath bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := web.PathIdent(c)
		if _, err := parseUUIDArg("chassis_uuid", id); err != nil {
			return apiError(err, "")
		}
		q := c.QueryParams()
		q.Set("chassis_uuid", id)
		return h.listNodes(c, detailPath)
	}
}

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
		u, _ := parseUUIDArg("chassis_uuid", q.Get("chassis_uuid"))
		id, err := h.store.q.ChassisIDByUUID(ctx, u)
		if errors.Is(err, pgx.ErrNoRows) {
			return web.NotFound("Chassis %s could not be found.", q.Get("chassis_uuid"))
		}
		if err != nil {
			return err
		}
		opts.ChassisID = &id
	}
	project, err := ListScope(c, h.opts.Rules, "node", opts.Owner)
	if err != nil {
		return err
	}
	if project != nil {
		if opts.Project != nil && *opts.Project != *project {
			return Forbidden("baremetal:node:list_all")
		}
		opts.Project = project
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
