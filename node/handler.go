package node

import (
	"io"
	"net/url"
	"strings"

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
		return nil, web.BadRequest("Expected a JSON object in the request body, got %s", web.PyRepr(v))
	}
	return m, nil
}

// --- create ---------------------------------------------------------------
