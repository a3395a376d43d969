package node

import (
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/metalloc/metalloc/auth"
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
	// Rules are the access rules (Ironic's baremetal:node:* defaults in
	// keystone mode; the zero value allows everything, as Ironic's
	// noauth and http_basic do).
	Rules auth.Rules
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
//	GET    /ui/fleet                       the operator page's fleet summary (Fleet; metalloc's own, gzip)
//
//	GET    /nodes/{ident}/validate         each interface's validation (also /nodes/validate?node=)
//	GET    /chassis/{uuid}/nodes[/detail]  the nodes of a chassis
//	GET    /shards                         shards and their node counts (1.82)
//
// and the routes of hardware interfaces (driverRoutes: states/raid,
// states/console, states/boot_mode, states/secure_boot, management/...,
// vendor_passthru, vifs, bios, history, inventory), answered as the node's
// interfaces answer them in Ironic, and GET /nodes/{ident}/{segment} for
// any other segment (getField).
func (h *Handler) Register(v1 *echo.Group) {
	v1.POST("/nodes", h.create)
	v1.GET("/nodes", h.list)
	v1.GET("/nodes/detail", h.detail)
	v1.GET("/nodes/:ident", h.guard(h.get))
	v1.PATCH("/nodes/:ident", h.patch) // rules per patched path, in patch
	v1.DELETE("/nodes/:ident", h.guard(h.delete, "baremetal:node:delete"))
	v1.PUT("/nodes/:ident/maintenance", h.guard(h.setMaintenance, "baremetal:node:set_maintenance"))
	v1.DELETE("/nodes/:ident/maintenance", h.guard(h.clearMaintenance, "baremetal:node:clear_maintenance"))
	v1.GET("/nodes/:ident/states", h.guard(h.states, "baremetal:node:get_states"))
	v1.PUT("/nodes/:ident/states/power", h.guard(h.power, "baremetal:node:set_power_state"))
	v1.PUT("/nodes/:ident/states/provision", h.guard(h.provision, "baremetal:node:set_provision_state"))
	v1.GET("/nodes/:ident/traits", h.guard(h.getTraits, "baremetal:node:traits:list"))
	v1.PUT("/nodes/:ident/traits", h.guard(h.setTraits, "baremetal:node:traits:set"))
	v1.DELETE("/nodes/:ident/traits", h.guard(h.deleteTraits, "baremetal:node:traits:delete"))
	v1.PUT("/nodes/:ident/traits/:trait", h.guard(h.addTrait, "baremetal:node:traits:set"))
	v1.DELETE("/nodes/:ident/traits/:trait", h.guard(h.deleteTrait, "baremetal:node:traits:delete"))
	v1.GET("/nodes/validate", h.validateNode)
	v1.GET("/nodes/:ident/validate", h.validateNode)
	v1.GET("/shards", shardsGate(h.shards))
	v1.GET("/shards/:name", shardsGate(h.shard))
	v1.Match([]string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}, "/shards", shardsGate(web.ReadOnly))
	v1.GET("/chassis/:ident/nodes", h.chassisList(false))
	v1.GET("/chassis/:ident/nodes/detail", h.chassisList(true))
	h.registerDriverRoutes(v1)
	v1.GET("/ui/fleet", h.fleet, middleware.Gzip())
}

// guard checks the access rules of a /nodes/{ident} route on the node
// before next runs (CheckNode: 404 for a node the caller may not see, 403
// for a rule it fails). Open rules cost nothing: the node is not loaded.
func (h *Handler) guard(next echo.HandlerFunc, rules ...string) echo.HandlerFunc {
	return func(c echo.Context) error {
		if h.opts.Rules.Open() {
			return next(c)
		}
		ident, err := h.ident(c)
		if err != nil {
			return err
		}
		n, err := h.store.Get(c.Request().Context(), ident)
		if err != nil {
			return apiError(err, ident)
		}
		if err := CheckNode(c, h.opts.Rules, n.Owner, n.Lessee, ident, rules...); err != nil {
			return err
		}
		return next(c)
	}
}

func (h *Handler) base(c echo.Context) string { return web.PublicURL(c, h.opts.PublicEndpoint) }

// ident returns the node identifier of the path, checked as Ironic's
// _lookup and get_rpc_node do: a uuid, or (from 1.5) a valid name.
func (h *Handler) ident(c echo.Context) (string, error) {
	if err := identSyntax(c); err != nil {
		return "", err
	}
	ident := web.PathIdent(c)
	if isUUIDLike(ident) {
		return ident, nil
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

// identSyntax is the first check of a node identifier, at any
// microversion (Ironic's args.uuid_or_name): a uuid or a valid logical name,
// else 400 "Expected UUID or name for node: <ident>" (or node_ident,
// identArg).
func identSyntax(c echo.Context) error {
	ident := web.PathIdent(c)
	if !isUUIDLike(ident) && !isValidLogicalName(ident) {
		return web.BadRequest("Expected UUID or name for %s: %s", identArg(c), ident)
	}
	return nil
}

// identArgRoutes are the sub-routes of Ironic's node sub-controllers that
// are attributes of its NodesController (states, maintenance, management,
// vendor passthru): their methods validate the identifier as the argument
// node_ident. The node itself and the sub-controllers found by the node
// _lookup (traits, bios, allocation, history, inventory, ...) call it node.
var identArgRoutes = []string{"/nodes/:ident/states", "/nodes/:ident/maintenance",
	"/nodes/:ident/management", "/nodes/:ident/vendor_passthru"}

// identArg is the name an invalid node identifier of c's route is reported
// under: "node_ident" or "node".
func identArg(c echo.Context) string {
	for _, r := range identArgRoutes {
		if strings.Contains(c.Path(), r) {
			return "node_ident"
		}
	}
	return "node"
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
		return nil, web.BadRequest("The request body is not valid JSON: %s", web.JSONProblem(err))
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
		return nil, web.BadRequest("Expected a JSON object in the request body, got %s", web.PyRepr(v))
	}
	return m, nil
}

// --- create ---------------------------------------------------------------
