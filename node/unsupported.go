package node

import (
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// driverRoute is a /v1/nodes/{ident}/... route of Ironic 21.4 answered by
// one of the node's hardware interfaces (RAID, console, boot mode,
// management, vendor passthru, VIFs, BIOS, history, inventory). The
// answers of interfaces with the feature are in hardware.go, vif.go and
// history.go; an interface without it answers as Ironic 21.4 answers for a
// node whose hardware type lacks the feature (the no-* interfaces, or a
// management interface without the optional method): reads of data only
// such an interface produces are empty, anything else is Ironic's
// UnsupportedDriverExtension naming the interface or method. The checks
// run in Ironic's order: identifier, arguments, node and access rule,
// microversion (or the microversion first, where Ironic's routing checks
// it first), then the answer.
type driverRoute struct {
	method, path string
	// since is the microversion the route appeared in (zero: always there);
	// below it the request gets gone, before the node is looked up when
	// goneFirst (Ironic's routing or the top of its handler checks it).
	since     web.Version
	gone      func() error
	goneFirst bool
	// args are the accepted query parameters and body keys (others are 400
	// "Unexpected arguments"), required those that must be there, bools
	// those parsed as args.boolean.
	args, required, bools []string
	// anyArgs: any argument is accepted (a **kwargs handler).
	anyArgs bool
	// raidBody: the body is one argument, target_raid_config, a JSON object
	// (none is {}).
	raidBody bool
	// rule is the access rule Ironic checks on the node.
	rule string
	// answer is the answer for a node the caller may use; body is the
	// request's JSON object (nil when none).
	answer func(h *Handler, c echo.Context, n *Node, body map[string]any) error
}

// unsupported is Ironic's UnsupportedDriverExtension for n's driver and the
// named interface or method, with the status Ironic gives it (400; the API
// turns it into 404 for RAID).
func unsupported(status int, n *Node, extension string) error {
	return web.Errorf(status, "Driver %s does not support %s (disabled or not implemented).", n.Driver, extension)
}

// lacks answers UnsupportedDriverExtension (400) for extension.
func lacks(extension string) func(*Handler, echo.Context, *Node, map[string]any) error {
	return func(_ *Handler, _ echo.Context, n *Node, _ map[string]any) error {
		return unsupported(http.StatusBadRequest, n, extension)
	}
}

// empty answers 200 with doc.
func empty(doc map[string]any) func(*Handler, echo.Context, *Node, map[string]any) error {
	return func(_ *Handler, c echo.Context, _ *Node, _ map[string]any) error {
		return c.JSON(http.StatusOK, doc)
	}
}

// notFound is the 404 of Ironic's routing for a sub-controller below its
// microversion.
func notFound() error { return web.NotFound("The resource could not be found.") }

func since76() error {
	return web.NotFound("This endpoint is supported starting with the API version 1.76")
}

// driverRoutes are the routes of driverRoute, in Ironic's order.
var driverRoutes = []driverRoute{
	// NodeStatesController.raid: the body is the target RAID configuration.
	// Without a RAID interface an empty one is stored (204), any other is
	// refused, with 404 as the API changes it. The version is checked after
	// the node is found.
	{method: http.MethodPut, path: "/nodes/:ident/states/raid", since: web.Version{Major: 1, Minor: 12},
		gone:     func() error { return web.Errorf(http.StatusNotAcceptable, "Request not acceptable.") },
		raidBody: true, rule: "baremetal:node:set_raid_state", answer: (*Handler).raid},
	// NodeConsoleController: a console that is not enabled reads as such
	// without asking the interface.
	{method: http.MethodGet, path: "/nodes/:ident/states/console", rule: "baremetal:node:get_console",
		answer: func(_ *Handler, c echo.Context, n *Node, _ map[string]any) error {
			if n.ConsoleEnabled {
				return unsupported(http.StatusBadRequest, n, "console")
			}
			return c.JSON(http.StatusOK, map[string]any{"console_enabled": false, "console_info": nil})
		}},
	{method: http.MethodPut, path: "/nodes/:ident/states/console", args: []string{"enabled"}, required: []string{"enabled"},
		bools: []string{"enabled"}, rule: "baremetal:node:set_console_state", answer: lacks("console")},
	// Boot mode and secure boot: Ironic accepts these (202) and records the
	// driver's refusal in last_error; metalloc refuses at once.
	{method: http.MethodPut, path: "/nodes/:ident/states/boot_mode", since: web.Version{Major: 1, Minor: 76}, gone: since76,
		args: []string{"target"}, required: []string{"target"}, rule: "baremetal:node:set_boot_mode",
		answer: func(_ *Handler, _ echo.Context, n *Node, body map[string]any) error {
			if t := pyReprPlain(body["target"]); t != "bios" && t != "uefi" {
				return web.BadRequest("Invalid boot mode %s requested for node. Allowed boot modes are: bios, uefi", t)
			}
			return unsupported(http.StatusBadRequest, n, "set_boot_mode")
		}},
	{method: http.MethodPut, path: "/nodes/:ident/states/secure_boot", since: web.Version{Major: 1, Minor: 76}, gone: since76,
		args: []string{"target"}, required: []string{"target"}, bools: []string{"target"},
		rule: "baremetal:node:set_secure_boot", answer: lacks("set_secure_boot_state")},
	// NodeManagementController: boot devices are every management
	// interface's (so the interface is named), the rest optional methods.
	{method: http.MethodGet, path: "/nodes/:ident/management/boot_device", rule: "baremetal:node:get_boot_device", answer: (*Handler).getBootDevice},
	{method: http.MethodPut, path: "/nodes/:ident/management/boot_device", args: []string{"boot_device", "persistent"},
		required: []string{"boot_device"}, bools: []string{"persistent"}, rule: "baremetal:node:set_boot_device", answer: (*Handler).setBootDevice},
	{method: http.MethodGet, path: "/nodes/:ident/management/boot_device/supported", rule: "baremetal:node:get_boot_device",
		answer: (*Handler).supportedBootDevices},
	{method: http.MethodPut, path: "/nodes/:ident/management/inject_nmi", since: web.Version{Major: 1, Minor: 29},
		gone: func() error { return web.NotFound("Resource could not be found.") }, goneFirst: true,
		rule: "baremetal:node:inject_nmi", answer: lacks("inject_nmi")},
	{method: http.MethodGet, path: "/nodes/:ident/management/indicators", anyArgs: true, rule: "baremetal:node:get_indicator_state",
		answer: (*Handler).listIndicators},
	{method: http.MethodGet, path: "/nodes/:ident/management/indicators/:indicator", rule: "baremetal:node:get_indicator_state",
		answer: (*Handler).getIndicator},
	{method: http.MethodPut, path: "/nodes/:ident/management/indicators/:indicator", args: []string{"state"}, required: []string{"state"},
		rule: "baremetal:node:set_indicator_state", answer: (*Handler).setIndicator},
	// NodeVendorPassthruController: the vendor interface's methods.
	{method: http.MethodGet, path: "/nodes/:ident/vendor_passthru/methods", rule: "baremetal:node:vendor_passthru",
		answer: (*Handler).vendorMethods},
	// NodeVIFController: the VIFs the network interface records (vif.go).
	{method: http.MethodGet, path: "/nodes/:ident/vifs", since: web.Version{Major: 1, Minor: 28}, gone: notFound, goneFirst: true,
		rule: "baremetal:node:vif:list", answer: (*Handler).listVIFs},
	{method: http.MethodPost, path: "/nodes/:ident/vifs", since: web.Version{Major: 1, Minor: 28}, gone: notFound, goneFirst: true,
		rule: "baremetal:node:vif:attach", answer: (*Handler).attachVIF},
	{method: http.MethodDelete, path: "/nodes/:ident/vifs/:vif", since: web.Version{Major: 1, Minor: 28}, gone: notFound, goneFirst: true,
		rule: "baremetal:node:vif:detach", answer: (*Handler).detachVIF},
	// NodeBiosController: the settings a BIOS interface cached (none).
	{method: http.MethodGet, path: "/nodes/:ident/bios", since: web.Version{Major: 1, Minor: 40}, gone: notFound, goneFirst: true,
		args: []string{"detail", "fields"}, rule: "baremetal:node:bios:get", answer: empty(map[string]any{"bios": []any{}})},
	{method: http.MethodGet, path: "/nodes/:ident/bios/:setting", since: web.Version{Major: 1, Minor: 40}, gone: notFound, goneFirst: true,
		rule: "baremetal:node:bios:get",
		answer: func(_ *Handler, c echo.Context, n *Node, _ map[string]any) error {
			return web.NotFound("Node %s doesn't have a BIOS setting '%s'", n.UUID, c.Param("setting"))
		}},
	// NodeHistoryController (history.go) and NodeInventoryController:
	// metalloc records no inspection inventory.
	{method: http.MethodGet, path: "/nodes/:ident/history", since: web.Version{Major: 1, Minor: 78}, gone: notFound, goneFirst: true,
		args: []string{"detail", "marker", "limit"}, rule: "baremetal:node:history:get", answer: (*Handler).listHistory},
	{method: http.MethodGet, path: "/nodes/:ident/history/:event", since: web.Version{Major: 1, Minor: 78}, gone: notFound, goneFirst: true,
		rule: "baremetal:node:history:get", answer: (*Handler).getHistory},
	{method: http.MethodGet, path: "/nodes/:ident/inventory", since: web.Version{Major: 1, Minor: 81}, gone: notFound, goneFirst: true,
		rule: "baremetal:node:inventory:get",
		answer: func(_ *Handler, _ echo.Context, n *Node, _ map[string]any) error {
			// Ironic names the node by its database id here.
			return web.NotFound("Node inventory record for node %d could not be found.", n.ID)
		}},
}

// vendorPassthru is /nodes/{ident}/vendor_passthru/{method} (ironicclient's
// form) or /nodes/{ident}/vendor_passthru?method={method}, which Ironic
// routes for every HTTP method to the vendor interface (the body is the
// method's data).
var vendorPassthru = driverRoute{path: "/nodes/:ident/vendor_passthru", args: []string{"method"}, rule: "baremetal:node:vendor_passthru",
	answer: (*Handler).vendorCall}

// registerDriverRoutes mounts driverRoutes, vendorPassthru and getField.
func (h *Handler) registerDriverRoutes(v1 *echo.Group) {
	for _, r := range driverRoutes {
		v1.Add(r.method, r.path, h.driverRoute(r))
	}
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		v1.Add(m, vendorPassthru.path, h.driverRoute(vendorPassthru))
		v1.Add(m, vendorPassthru.path+"/:method", h.driverRoute(vendorPassthru))
	}
	v1.GET("/nodes/:ident/:field", h.guard(h.getField))
}

// getField is GET /nodes/{ident}/{segment} for any other segment (static
// routes such as /states or /traits take precedence): Ironic 21.4's routing
// hands the segment to the node's show as its fields argument, so
// /nodes/{ident}/name shows the name and /nodes/{ident}/firmware (a route of
// later releases) is 400 "Field firmware is not a valid field.".
func (h *Handler) getField(c echo.Context) error {
	q := c.QueryParams()
	if _, ok := q["fields"]; !ok {
		q["fields"] = []string{c.Param("field")}
	}
	return h.get(c)
}

// driverRoute serves r in Ironic's order of checks. Under a node
// sub-controller found by Ironic's _lookup (bios, history, ...) the
// identifier's syntax and the microversion come first, then the arguments;
// under /states, /management and /vendor_passthru the identifier is one of
// the method's arguments: unexpected arguments first, then the identifier,
// then the other arguments, then a microversion checked in the method.
// Names (1.5), the node, the access rule and a late microversion follow.
func (h *Handler) driverRoute(r driverRoute) echo.HandlerFunc {
	return func(c echo.Context) error {
		lookup := identArg(c) == "node"
		old := r.since != (web.Version{}) && !web.RequestVersion(c).AtLeast(r.since.Major, r.since.Minor)
		if lookup {
			if err := identSyntax(c); err != nil {
				return err
			}
			if old && r.goneFirst {
				return r.gone()
			}
		}
		var body map[string]any
		var err error
		if r.method == http.MethodPut && !r.raidBody {
			if body, err = readObject(c); err != nil {
				return err
			}
		}
		if !r.anyArgs {
			if err := checkArgs(c, body, r.args...); err != nil {
				return apiError(err, web.PathIdent(c))
			}
		}
		if !lookup {
			if err := identSyntax(c); err != nil {
				return err
			}
		}
		if r.raidBody {
			if body, err = raidConfig(c); err != nil {
				return err
			}
		}
		if err := checkParams(c, r, body); err != nil {
			return apiError(err, web.PathIdent(c))
		}
		if !lookup && old && r.goneFirst {
			return r.gone()
		}
		ident, err := h.ident(c) // names from 1.5: a lookup rule
		if err != nil {
			return err
		}
		n, err := h.store.Get(c.Request().Context(), ident)
		if err != nil {
			return apiError(err, ident)
		}
		if err := CheckNode(c, h.opts.Rules, n.Owner, n.Lessee, ident, r.rule); err != nil {
			return err
		}
		if old {
			return r.gone()
		}
		return r.answer(h, c, &n, body)
	}
}

// checkParams is the rest of args.validate for r's arguments (in the body
// or the query): booleans, and missing mandatory ones.
func checkParams(c echo.Context, r driverRoute, body map[string]any) error {
	for _, name := range r.args {
		v, ok := body[name]
		if !ok && c.QueryParams().Has(name) {
			v, ok = c.QueryParam(name), true
		}
		if !ok {
			if slices.Contains(r.required, name) {
				return invalidf("Missing mandatory parameter: %s", name)
			}
			continue
		}
		if slices.Contains(r.bools, name) {
			if _, err := parseBool(name, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// raidConfig reads the body of PUT /nodes/{ident}/states/raid as Ironic's
// args.types(dict): a JSON object, none being {}.
func raidConfig(c echo.Context) (map[string]any, error) {
	raw, err := io.ReadAll(io.LimitReader(c.Request().Body, 16<<20))
	if err != nil {
		return nil, web.BadRequest("Could not read the request body: %v", err)
	}
	var v any = map[string]any{}
	if strings.TrimSpace(string(raw)) != "" {
		if v, err = decodeJSON(raw); err != nil {
			return nil, web.BadRequest("The request body is not valid JSON: %s", web.JSONProblem(err))
		}
	}
	cfg, ok := v.(map[string]any)
	if !ok {
		return nil, web.BadRequest("Expected types <class 'dict'> for target_raid_config: %s", pyReprPlain(v))
	}
	return cfg, nil
}
