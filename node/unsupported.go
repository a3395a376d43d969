package node

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// driverRoute is a /v1/nodes/{ident}/... route of Ironic 21.4 that needs a
// hardware interface metalloc does not drive (RAID, console, management,
// vendor passthru, BIOS, history, inventory). It answers as Ironic answers
// for a node whose hardware type lacks that interface (the no-* interface
// implementations): a read of data only such an interface produces is
// empty, anything else is Ironic's UnsupportedDriverExtension naming the
// interface. Firmware (Ironic 23.0) and vifs are not routes here: 404.
type driverRoute struct {
	method, path string
	// since is the microversion the route appeared in; below it the
	// request gets gone.
	since web.Version
	// gone is the answer below since, and whether Ironic gives it before
	// looking the node up (a sub-controller gated in the node _lookup, or a
	// check at the top of the handler) rather than after.
	gone      func() error
	goneFirst bool
	// rule is the access rule Ironic checks on the node.
	rule string
	// answer is the answer for a node the caller may use.
	answer func(c echo.Context, n *Node) error
}

// unsupported is Ironic's UnsupportedDriverExtension for n's driver and the
// named interface, with the status Ironic gives it (400; 404 for RAID).
func unsupported(status int, n *Node, iface string) error {
	return web.Errorf(status, "Driver %s does not support %s (disabled or not implemented).", n.Driver, iface)
}

func management(_ echo.Context, n *Node) error {
	return unsupported(http.StatusBadRequest, n, "management")
}

// notFound is the 404 of pecan's routing (a sub-controller below its
// version).
func notFound() error { return web.NotFound("The resource could not be found.") }

// driverRoutes are the routes of driverRoute, in Ironic's order.
var driverRoutes = []driverRoute{
	// NodeStatesController.raid: the version is checked after the node is
	// found; the RAID error's status is changed to 404 by the API.
	{method: http.MethodPut, path: "/nodes/:ident/states/raid", since: web.Version{Major: 1, Minor: 12},
		gone: func() error { return web.Errorf(http.StatusNotAcceptable, "Request not acceptable.") },
		rule: "baremetal:node:set_raid_state",
		answer: func(_ echo.Context, n *Node) error {
			return unsupported(http.StatusNotFound, n, "raid")
		}},
	// NodeConsoleController: a console that is not enabled reads as such
	// without asking the interface.
	{method: http.MethodGet, path: "/nodes/:ident/states/console", rule: "baremetal:node:get_console",
		answer: func(c echo.Context, n *Node) error {
			if n.ConsoleEnabled {
				return unsupported(http.StatusBadRequest, n, "console")
			}
			return c.JSON(http.StatusOK, map[string]any{"console_enabled": false, "console_info": nil})
		}},
	{method: http.MethodPut, path: "/nodes/:ident/states/console", rule: "baremetal:node:set_console_state",
		answer: func(_ echo.Context, n *Node) error { return unsupported(http.StatusBadRequest, n, "console") }},
	{method: http.MethodPut, path: "/nodes/:ident/states/boot_mode", since: web.Version{Major: 1, Minor: 76},
		gone: since76, rule: "baremetal:node:set_boot_mode", answer: management},
	{method: http.MethodPut, path: "/nodes/:ident/states/secure_boot", since: web.Version{Major: 1, Minor: 76},
		gone: since76, rule: "baremetal:node:set_secure_boot", answer: management},
	// NodeManagementController.
	{method: http.MethodGet, path: "/nodes/:ident/management/boot_device", rule: "baremetal:node:get_boot_device", answer: management},
	{method: http.MethodPut, path: "/nodes/:ident/management/boot_device", rule: "baremetal:node:set_boot_device", answer: management},
	{method: http.MethodGet, path: "/nodes/:ident/management/boot_device/supported", rule: "baremetal:node:get_boot_device", answer: management},
	{method: http.MethodPut, path: "/nodes/:ident/management/inject_nmi", since: web.Version{Major: 1, Minor: 29},
		gone: func() error { return web.NotFound("Resource could not be found.") }, goneFirst: true,
		rule: "baremetal:node:inject_nmi", answer: management},
	{method: http.MethodGet, path: "/nodes/:ident/management/indicators", since: web.Version{Major: 1, Minor: 63},
		gone: notFound, goneFirst: true, rule: "baremetal:node:get_indicator_state", answer: management},
	{method: http.MethodGet, path: "/nodes/:ident/management/indicators/:indicator", since: web.Version{Major: 1, Minor: 63},
		gone: notFound, goneFirst: true, rule: "baremetal:node:get_indicator_state", answer: management},
	{method: http.MethodPut, path: "/nodes/:ident/management/indicators/:indicator", since: web.Version{Major: 1, Minor: 63},
		gone: notFound, goneFirst: true, rule: "baremetal:node:set_indicator_state", answer: management},
	// NodeVendorPassthruController with the no-vendor interface: no
	// methods, and no handler for any.
	{method: http.MethodGet, path: "/nodes/:ident/vendor_passthru/methods", rule: "baremetal:node:vendor_passthru",
		answer: func(c echo.Context, _ *Node) error { return c.JSON(http.StatusOK, map[string]any{}) }},
	// NodeBiosController: the settings an interface cached (none).
	{method: http.MethodGet, path: "/nodes/:ident/bios", since: web.Version{Major: 1, Minor: 40},
		gone: notFound, goneFirst: true, rule: "baremetal:node:bios:get",
		answer: func(c echo.Context, _ *Node) error { return c.JSON(http.StatusOK, map[string]any{"bios": []any{}}) }},
	{method: http.MethodGet, path: "/nodes/:ident/bios/:setting", since: web.Version{Major: 1, Minor: 40},
		gone: notFound, goneFirst: true, rule: "baremetal:node:bios:get",
		answer: func(c echo.Context, n *Node) error {
			return web.NotFound("Node %s doesn't have a BIOS setting '%s'", n.UUID, c.Param("setting"))
		}},
	// NodeHistoryController and NodeInventoryController: metalloc records
	// no history events and no inspection inventory.
	{method: http.MethodGet, path: "/nodes/:ident/history", since: web.Version{Major: 1, Minor: 78},
		gone: notFound, goneFirst: true, rule: "baremetal:node:history:get",
		answer: func(c echo.Context, _ *Node) error { return c.JSON(http.StatusOK, map[string]any{"history": []any{}}) }},
	{method: http.MethodGet, path: "/nodes/:ident/history/:event", since: web.Version{Major: 1, Minor: 78},
		gone: notFound, goneFirst: true, rule: "baremetal:node:history:get",
		answer: func(c echo.Context, _ *Node) error {
			return web.NotFound("Node history record %s could not be found.", c.Param("event"))
		}},
	{method: http.MethodGet, path: "/nodes/:ident/inventory", since: web.Version{Major: 1, Minor: 81},
		gone: notFound, goneFirst: true, rule: "baremetal:node:inventory:get",
		answer: func(_ echo.Context, n *Node) error {
			return web.NotFound("Node inventory record for node %s could not be found.", n.UUID)
		}},
}

func since76() error {
	return web.NotFound("This endpoint is supported starting with the API version 1.76")
}

// vendorPassthruMethods are the methods /vendor_passthru answers (Ironic
// routes every method to its vendor interface).
var vendorPassthruMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// registerDriverRoutes mounts driverRoutes and /nodes/{ident}/vendor_passthru.
func (h *Handler) registerDriverRoutes(v1 *echo.Group) {
	for _, r := range driverRoutes {
		v1.Add(r.method, r.path, h.driverRoute(r))
	}
	passthru := h.driverRoute(driverRoute{rule: "baremetal:node:vendor_passthru",
		answer: func(c echo.Context, _ *Node) error {
			m := c.QueryParam("method")
			if m == "" {
				return web.BadRequest("Missing mandatory parameter: method")
			}
			return web.BadRequest("No handler for method %s", m)
		}})
	for _, m := range vendorPassthruMethods {
		v1.Add(m, "/nodes/:ident/vendor_passthru", passthru)
	}
}

// driverRoute serves r: the identifier (400 unless a uuid or valid name),
// the microversion, the node (404), the access rule (403), then r.answer.
func (h *Handler) driverRoute(r driverRoute) echo.HandlerFunc {
	return func(c echo.Context) error {
		ident, err := h.ident(c)
		if err != nil {
			return err
		}
		old := r.since != (web.Version{}) && !web.RequestVersion(c).AtLeast(r.since.Major, r.since.Minor)
		if old && r.goneFirst {
			return r.gone()
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
		return r.answer(c, &n)
	}
}
