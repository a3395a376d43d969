package port

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// HandlerOptions configures the port and port group API handlers.
type HandlerOptions struct {
	// PublicEndpoint is the base URL of links and Location headers ("" =
	// scheme://host of each request).
	PublicEndpoint string
	// MaxLimit caps list page sizes and is the default page size (0 =
	// web.DefaultMaxLimit).
	MaxLimit int
	// Rules are the access rules (Ironic's baremetal:port:* and
	// baremetal:portgroup:* defaults in keystone mode; the zero value
	// allows everything).
	Rules auth.Rules
}

// Handler serves Ironic's port and port group API on a Store.
type Handler struct {
	store *Store
	opts  HandlerOptions
}

// NewHandler returns a Handler.
func NewHandler(store *Store, opts HandlerOptions) *Handler {
	if opts.MaxLimit <= 0 {
		opts.MaxLimit = web.DefaultMaxLimit
	}
	return &Handler{store: store, opts: opts}
}

// Register mounts the routes on v1, a group that already negotiates the
// Ironic microversion (web.IronicVersion):
//
//	GET    /ports, /ports/detail                   list
//	POST   /ports                                  create (201)
//	GET    /ports/{uuid}                           show
//	PATCH  /ports/{uuid}                           update (JSON patch)
//	DELETE /ports/{uuid}                           delete (204)
//	GET    /nodes/{ident}/ports[/detail]           a node's ports
//	GET    /portgroups, /portgroups/detail         list (1.23)
//	POST   /portgroups                             create (201, 1.23)
//	GET    /portgroups/{ident}                     show (uuid or name)
//	PATCH  /portgroups/{ident}                     update
//	DELETE /portgroups/{ident}                     delete (204)
//	GET    /portgroups/{ident}/ports[/detail]      a port group's ports (1.24)
//	GET    /nodes/{ident}/portgroups[/detail]      a node's port groups (1.24)
func (h *Handler) Register(v1 *echo.Group) {
	v1.GET("/ports", h.listPorts(false, ""))
	v1.GET("/ports/detail", h.listPorts(true, ""))
	v1.POST("/ports", h.createPort)
	v1.GET("/ports/:ident", h.getPort)
	v1.PATCH("/ports/:ident", h.patchPort)
	v1.DELETE("/ports/:ident", h.deletePort)
	v1.GET("/nodes/:ident/ports", h.listPorts(false, "node"))
	v1.GET("/nodes/:ident/ports/detail", h.listPorts(true, "node"))

	v1.GET("/portgroups", h.listPortgroups(false, false))
	v1.GET("/portgroups/detail", h.listPortgroups(true, false))
	v1.POST("/portgroups", h.createPortgroup)
	v1.GET("/portgroups/:ident", h.getPortgroup)
	v1.PATCH("/portgroups/:ident", h.patchPortgroup)
	v1.DELETE("/portgroups/:ident", h.deletePortgroup)
	v1.GET("/portgroups/:ident/ports", h.listPorts(false, "portgroup"))
	v1.GET("/portgroups/:ident/ports/detail", h.listPorts(true, "portgroup"))
	v1.GET("/nodes/:ident/portgroups", h.listPortgroups(false, true))
	v1.GET("/nodes/:ident/portgroups/detail", h.listPortgroups(true, true))
}

func (h *Handler) base(c echo.Context) string { return web.PublicURL(c, h.opts.PublicEndpoint) }

// pathIdent is the unescaped {ident} of the path.
func pathIdent(c echo.Context) string {
	ident := c.Param("ident")
	if u, err := url.PathUnescape(ident); err == nil {
		ident = u
	}
	return ident
}

// uuidOrName is Ironic's args.uuid_or_name.
func uuidOrName(name, value string) error {
	if _, ok := web.UUIDLike(value); ok || web.ValidLogicalName(value, web.IronicMaxVersion) {
		return nil
	}
	return web.BadRequest("Expected UUID or name for %s: %s", name, value)
}

// uuidArg is Ironic's args.uuid.
func uuidArg(name, value string) (uuid.UUID, error) {
	if u, ok := web.UUIDLike(value); ok {
		return u, nil
	}
	return uuid.Nil, web.BadRequest("Expected UUID for %s: %s", name, value)
}

// macArg is Ironic's args.mac_address.
func macArg(name string, value any) (string, error) {
	s, _ := value.(string)
	if mac, ok := NormalizeMAC(s); ok {
		return mac, nil
	}
	return "", web.BadRequest("Expected valid MAC address for %s: %s", name, pyStr(value))
}

// pyStr is Python's str() of a JSON value.
func pyStr(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return web.PyRepr(v)
}

// apiError maps errors of this package and of node's helpers to responses:
// ErrNotFound is notFound (a *web.Error built by the caller), *node.Error
// by kind; *web.Error passes as is.
func apiError(err error, notFoundErr *web.Error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotFound) && notFoundErr != nil {
		return notFoundErr
	}
	var ne *node.Error
	if errors.As(err, &ne) {
		return ne.HTTP()
	}
	return err
}

func portNotFound(ident string) *web.Error { return web.NotFound("Port %s could not be found.", ident) }
func portgroupNotFound(ident string) *web.Error {
	return web.NotFound("Portgroup %s could not be found.", ident)
}
func nodeNotFound(ident string) *web.Error { return web.NotFound("Node %s could not be found.", ident) }

// operationNotPermitted is Ironic's OperationNotPermitted (403).
func operationNotPermitted() error {
	return web.Errorf(http.StatusForbidden, "Operation not permitted.")
}

func notAcceptable() error { return node.NotAcceptable().HTTP() }

// checkOn applies Ironic's check_port_policy_and_retrieve to an object of
// node owner/lessee: a caller who may not baremetal:node:get the node gets
// hidden (the object's 404), one failing rule 403.
func (h *Handler) checkOn(c echo.Context, owner, lessee *string, hidden error, rule string) error {
	if h.opts.Rules.Open() {
		return nil
	}
	creds := auth.Caller(c.Request().Context())
	t := node.NodeTarget(creds, owner, lessee)
	if !h.opts.Rules.Allowed("baremetal:node:get", t, creds) {
		return hidden
	}
	if !h.opts.Rules.Allowed(rule, t, creds) {
		return node.Forbidden(rule)
	}
	return nil
}

// checkCreate is the access check of POST /v1/ports and /v1/portgroups:
// rule on the node (owner and lessee nil when the node does not exist or
// the caller may not see it, as Ironic checks it before saying the node
// is missing).
// createDoc reads the body of a POST creating a kind ("port" or
// "portgroup"), validates it against schema and validate, and finds its
// node_uuid and checks rule on it, in Ironic's order: a missing body is 400
// `Missing argument: "<kind>"`, a node that does not exist or that the
// caller may not see is 400 `Node <uuid> could not be found.`. It returns the
// document, the node's uuid as sent and the node.
func (h *Handler) createDoc(c echo.Context, kind string, schema *jsonschema.Schema, validate func(map[string]any) error,
	rule string) (map[string]any, string, *NodeRef, error) {
	body, err := readBody(c)
	if err != nil {
		return nil, "", nil, err
	}
	if body == nil {
		return nil, "", nil, web.BadRequest("Missing argument: \"%s\"", kind)
	}
	if err := node.ValidateSchema(schema, kind, body); err != nil {
		return nil, "", nil, apiError(err, nil)
	}
	doc := body.(map[string]any)
	if err := validate(doc); err != nil {
		return nil, "", nil, err
	}
	nodeUUID := doc["node_uuid"].(string)
	var nref *NodeRef
	if n, err := h.store.Node(c.Request().Context(), nodeUUID); err == nil {
		nref = &n
	} else if !errors.Is(err, ErrNotFound) {
		return nil, "", nil, err
	}
	visible, err := h.checkCreate(c, nref, rule)
	if err != nil {
		return nil, "", nil, err
	}
	if !visible {
		return nil, "", nil, web.BadRequest("Node %s could not be found.", nodeUUID)
	}
	return doc, nodeUUID, nref, nil
}

func (h *Handler) checkCreate(c echo.Context, n *NodeRef, rule string) (visible bool, err error) {
	if h.opts.Rules.Open() {
		return n != nil, nil
	}
	creds := auth.Caller(c.Request().Context())
	var owner, lessee *string
	if n != nil {
		t := node.NodeTarget(creds, n.Owner, n.Lessee)
		if h.opts.Rules.Allowed("baremetal:node:get", t, creds) {
			owner, lessee, visible = n.Owner, n.Lessee, true
		}
	}
	if !h.opts.Rules.Allowed(rule, node.NodeTarget(creds, owner, lessee), creds) {
		return false, node.Forbidden(rule)
	}
	return visible, nil
}

// listParams are the list arguments checked before the access rules.
type listParams struct {
	detail *bool // the detail argument (nil: absent)
}

// parseList checks the types of limit (an integer), marker (a uuid) and
// detail (a boolean) as Ironic's args.validate does, before anything else;
// the rest of the page parameters are read by pageParams.
func (h *Handler) parseList(c echo.Context) (listParams, error) {
	q := c.QueryParams()
	var lp listParams
	if q.Has("limit") {
		if _, err := strconv.Atoi(strings.TrimSpace(q.Get("limit"))); err != nil {
			return lp, web.BadRequest("Expected an integer for limit: %s", q.Get("limit"))
		}
	}
	if q.Has("marker") {
		if _, err := uuidArg("marker", q.Get("marker")); err != nil {
			return lp, err
		}
	}
	if q.Has("detail") {
		b, err := node.ParseBool("detail", q.Get("detail"))
		if err != nil {
			return lp, apiError(err, nil)
		}
		lp.detail = &b
	}
	return lp, nil
}

// pageParams finishes parsing the page parameters after the access and
// version checks (limit positive and capped, sort_dir, the marker uuid).
func (h *Handler) pageParams(c echo.Context, invalidSort []string, keys map[string]bool) (ListOptions, error) {
	var opts ListOptions
	lp, err := web.ParseListParams(c, h.opts.MaxLimit)
	if err != nil {
		return opts, err
	}
	opts.Limit, opts.SortKey, opts.SortDesc = lp.Limit, lp.SortKey, lp.SortDesc
	if lp.Marker != "" {
		u, _ := web.UUIDLike(lp.Marker)
		opts.Marker = &u
	}
	if slices.Contains(invalidSort, opts.SortKey) {
		return opts, web.BadRequest("The sort_key value %s is an invalid field for sorting", opts.SortKey)
	}
	if !keys[opts.SortKey] {
		return opts, web.BadRequest("The sort_key value \"%s\" is an invalid field for sorting", opts.SortKey)
	}
	return opts, nil
}

// addressFilter is the list filter "address" (a MAC address, 400 when not
// one, normalised to lower case), nil when absent.
func addressFilter(q url.Values) (*string, error) {
	if !q.Has("address") {
		return nil, nil
	}
	mac, err := macArg("address", q.Get("address"))
	if err != nil {
		return nil, err
	}
	return &mac, nil
}

// readBody decodes the JSON request body (nil when empty) for a schema
// check.
func readBody(c echo.Context) (any, error) {
	v, err := node.ReadBody(c)
	return v, apiError(err, nil)
}

// listResource is the path of a list for its next link: key, or
// key/detail.
func listResource(key string, detailPath bool) string {
	if detailPath {
		return key + "/detail"
	}
	return key
}

// tenancy is what the access rules read of a port or port group: its
// node's owner and lessee.
type tenancy interface {
	nodeTenancy() (owner, lessee *string)
}

func (p Port) nodeTenancy() (owner, lessee *string)      { return p.NodeOwner, p.NodeLessee }
func (g Portgroup) nodeTenancy() (owner, lessee *string) { return g.NodeOwner, g.NodeLessee }

// lookup reads the port or port group read finds for the path's identifier
// and applies rule to it (Ironic's check_port_policy_and_retrieve and its
// port group twin): notFound(ident) when it is unknown or hidden.
func lookup[T tenancy](h *Handler, c echo.Context, rule string, notFound func(string) *web.Error,
	read func(ctx context.Context, ident string) (T, error)) (T, error) {
	var zero T
	ident := pathIdent(c)
	v, err := read(c.Request().Context(), ident)
	if err != nil {
		return zero, apiError(err, notFound(ident))
	}
	owner, lessee := v.nodeTenancy()
	if err := h.checkOn(c, owner, lessee, notFound(ident), rule); err != nil {
		return zero, err
	}
	return v, nil
}

// readPatch reads a PATCH body as a JSON patch (Ironic's messages for a
// body that is not one).
func readPatch(c echo.Context) ([]node.PatchOp, error) {
	if err := loadSchemas(); err != nil {
		return nil, err
	}
	ops, err := node.ReadPatch(c)
	return ops, apiError(err, nil)
}

// deleteIn runs del in a transaction and answers 204, or the error
// (notFound(ident) for a row gone meanwhile).
func (h *Handler) deleteIn(c echo.Context, notFound func(string) *web.Error, del func(ctx context.Context, tx Tx) error) error {
	ctx := c.Request().Context()
	if err := h.store.InTx(ctx, func(tx Tx) error { return del(ctx, tx) }); err != nil {
		return apiError(err, notFound(pathIdent(c)))
	}
	return c.NoContent(http.StatusNoContent)
}
