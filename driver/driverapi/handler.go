// Package driverapi serves Ironic's drivers resource (GET /v1/drivers...)
// from the hardware types the live conductors registered (the drivers
// column of the conductors table) and what package driver's registry says
// about each: Ironic 21.4's documents, microversion gates and messages
// (api/controllers/v1/driver.py).
package driverapi

import (
	"context"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/driver"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// HandlerOptions configures the drivers API.
type HandlerOptions struct {
	// PublicEndpoint is the base URL of links ("" = scheme://host of each
	// request).
	PublicEndpoint string
	// Rules are the access rules (Ironic's baremetal:driver:* defaults in
	// keystone mode; the zero value allows everything).
	Rules auth.Rules
}

// Handler serves the drivers API.
type Handler struct {
	q    *Queries
	opts HandlerOptions
}

// NewHandler returns a Handler reading the conductors table through db.
func NewHandler(db DBTX, opts HandlerOptions) *Handler {
	return &Handler{q: New(db), opts: opts}
}

// Register mounts, on v1 (a group negotiating the Ironic microversion):
//
//	GET /drivers                                      list (?detail, ?type, ?fields)
//	GET /drivers/{name}                               show
//	GET /drivers/{name}/properties                    driver properties
//	GET /drivers/{name}/raid/logical_disk_properties  RAID logical disk keys (1.12)
//	GET /drivers/{name}/vendor_passthru/methods       driver vendor methods
//	*   /drivers/{name}/vendor_passthru[/{method}]    call one (none exist)
func (h *Handler) Register(v1 *echo.Group) {
	v1.GET("/drivers", h.list)
	v1.GET("/drivers/:name", h.show)
	v1.GET("/drivers/:name/properties", h.properties)
	v1.GET("/drivers/:name/raid/logical_disk_properties", h.raidProperties)
	v1.GET("/drivers/:name/vendor_passthru/methods", h.vendorMethods)
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		v1.Add(m, "/drivers/:name/vendor_passthru", h.vendorCall)
		v1.Add(m, "/drivers/:name/vendor_passthru/:method", h.vendorCall)
	}
}

func (h *Handler) base(c echo.Context) string { return web.PublicURL(c, h.opts.PublicEndpoint) }

// hosted is one hardware type and the live conductors serving it.
type hosted struct {
	name  string
	hosts []string
}

// active returns the hardware types the live conductors serve, registry
// types first (in registry order), then others by name, each with its
// hosts sorted (Ironic's get_active_hardware_type_dict).
func (h *Handler) active(ctx context.Context) ([]hosted, error) {
	rows, err := h.q.ActiveHardwareTypes(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string][]string{}
	for _, r := range rows {
		for _, d := range r.Drivers {
			if !slices.Contains(byName[d], r.Hostname) {
				byName[d] = append(byName[d], r.Hostname)
			}
		}
	}
	var out []hosted
	for _, n := range driver.Names() {
		if hosts, ok := byName[n]; ok {
			out = append(out, hosted{n, hosts})
			delete(byName, n)
		}
	}
	var rest []string
	for n := range byName {
		rest = append(rest, n)
	}
	slices.Sort(rest)
	for _, n := range rest {
		out = append(out, hosted{n, byName[n]})
	}
	for i := range out {
		slices.Sort(out[i].hosts)
	}
	return out, nil
}

// served returns the hardware type name if a live conductor serves it:
// otherwise 404, "The driver '<name>' is unknown." (Ironic's hash ring),
// or "No conductors registered." when no conductor is alive.
func (h *Handler) served(ctx context.Context, name string) error {
	types, err := h.active(ctx)
	if err != nil {
		return err
	}
	if len(types) == 0 {
		return web.NotFound("No conductors registered.")
	}
	for _, t := range types {
		if t.name == name {
			return nil
		}
	}
	return web.NotFound("The driver '%s' is unknown.", name)
}

// render is Ironic's driver convert_with_links for t at the request's
// version: name, hosts and links; properties links from 1.14; type (and,
// when detail, the default and enabled implementations of each interface)
// from 1.30, storage from 1.33, rescue from 1.38, bios from 1.40.
func (h *Handler) render(c echo.Context, t hosted, detail bool) map[string]any {
	v := web.RequestVersion(c)
	base := h.base(c)
	doc := map[string]any{
		"name":  t.name,
		"hosts": t.hosts,
		"links": web.ResourceLinks(base, "drivers", t.name),
	}
	if v.AtLeast(1, 14) {
		doc["properties"] = web.ResourceLinks(base, "drivers", t.name+"/properties")
	}
	if !v.AtLeast(1, 30) {
		return doc
	}
	doc["type"] = "dynamic"
	if !detail {
		return doc
	}
	ht, known := driver.Lookup(t.name)
	for _, it := range driver.InterfaceTypes {
		if (it == "storage" && !v.AtLeast(1, 33)) || (it == "rescue" && !v.AtLeast(1, 38)) ||
			(it == "bios" && !v.AtLeast(1, 40)) {
			continue
		}
		var def any
		enabled := []string{}
		if known {
			def = ht.Interfaces[it].Default
			enabled = ht.Interfaces[it].Enabled
		}
		doc["default_"+it+"_interface"] = def
		doc["enabled_"+it+"_interfaces"] = enabled
	}
	return doc
}

// fieldsArg reads ?fields, refused (406) below 1.77 as
// _check_allow_driver_fields does.
func fieldsArg(c echo.Context) ([]string, error) {
	if !c.QueryParams().Has("fields") {
		return nil, nil
	}
	if !web.RequestVersion(c).AtLeast(1, 77) {
		return nil, node.NotAcceptable().HTTP()
	}
	fields, err := web.ParseFields(c)
	if fields == nil && err == nil {
		fields = []string{}
	}
	return fields, err
}

// newer is the 406 of the detail and type arguments below 1.30.
func newer() error {
	return web.Errorf(http.StatusNotAcceptable, "Request not acceptable. The minimal required API version should be 1.30")
}

// list is GET /drivers: in Ironic's order, arguments, fields with detail,
// the access rule, the version of detail, type and fields, then type's
// value; "classic" drivers are gone since Rocky (empty list).
func (h *Handler) list(c echo.Context) error {
	q := c.QueryParams()
	if err := node.CheckArgs(c, nil, "type", "detail", "fields"); err != nil {
		return httpErr(err)
	}
	var detail *bool
	if q.Has("detail") {
		b, err := web.ParseBool("detail", q.Get("detail"))
		if err != nil {
			return httpErr(err)
		}
		detail = &b
	}
	if q.Get("fields") != "" && detail != nil && *detail {
		return web.BadRequest("Can not specify ?detail=True and fields in the same request.")
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:driver:get"); err != nil {
		return err
	}
	v := web.RequestVersion(c)
	if (detail != nil || q.Has("type")) && !v.AtLeast(1, 30) {
		return newer()
	}
	fields, err := fieldsArg(c)
	if err != nil {
		return err
	}
	typ := q.Get("type")
	if q.Has("type") && typ != "classic" && typ != "dynamic" {
		return web.BadRequest(`"type" filter must be one of "classic" or "dynamic", if specified.`)
	}
	docs := []map[string]any{}
	if typ != "classic" {
		types, err := h.active(c.Request().Context())
		if err != nil {
			return err
		}
		for _, t := range types {
			doc, err := web.ProjectFields(h.render(c, t, detail != nil && *detail), fields)
			if err != nil {
				return err
			}
			docs = append(docs, doc)
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"drivers": docs})
}

// show is GET /drivers/{name}: the detailed document of a hardware type a
// live conductor serves (404 DriverNotFound otherwise).
func (h *Handler) show(c echo.Context) error {
	if err := node.CheckArgs(c, nil, "fields"); err != nil {
		return httpErr(err)
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:driver:get"); err != nil {
		return err
	}
	fields, err := fieldsArg(c)
	if err != nil {
		return err
	}
	name := c.Param("name")
	types, err := h.active(c.Request().Context())
	if err != nil {
		return err
	}
	for _, t := range types {
		if t.name == name {
			doc, err := web.ProjectFields(h.render(c, t, true), fields)
			if err != nil {
				return err
			}
			return c.JSON(http.StatusOK, doc)
		}
	}
	return web.NotFound("Could not find the following driver(s) or hardware type(s): %s.", name)
}

// properties is GET /drivers/{name}/properties.
func (h *Handler) properties(c echo.Context) error {
	if err := node.CheckArgs(c, nil); err != nil {
		return httpErr(err)
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:driver:get_properties"); err != nil {
		return err
	}
	name := c.Param("name")
	if err := h.served(c.Request().Context(), name); err != nil {
		return err
	}
	props := map[string]string{}
	if ht, ok := driver.Lookup(name); ok {
		props = ht.PropertiesOf()
	}
	return c.JSON(http.StatusOK, props)
}

// raidProperties is GET /drivers/{name}/raid/logical_disk_properties
// (406 below 1.12).
func (h *Handler) raidProperties(c echo.Context) error {
	if err := node.CheckArgs(c, nil); err != nil {
		return httpErr(err)
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:driver:get_raid_logical_disk_properties"); err != nil {
		return err
	}
	if !web.RequestVersion(c).AtLeast(1, 12) {
		return node.NotAcceptable().HTTP()
	}
	name := c.Param("name")
	if err := h.served(c.Request().Context(), name); err != nil {
		return err
	}
	if _, ok := driver.Lookup(name); !ok {
		return web.NotFound("%s", driver.Unsupported(name, "raid"))
	}
	return c.JSON(http.StatusOK, driver.RAIDLogicalDiskProperties())
}

// vendorMethods is GET /drivers/{name}/vendor_passthru/methods: the
// driver-level vendor methods, which no registered hardware type has.
func (h *Handler) vendorMethods(c echo.Context) error {
	if err := node.CheckArgs(c, nil); err != nil {
		return httpErr(err)
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:driver:vendor_passthru"); err != nil {
		return err
	}
	if err := h.served(c.Request().Context(), c.Param("name")); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{})
}

// vendorCall is /drivers/{name}/vendor_passthru?method=... (or
// /vendor_passthru/{method}) with any HTTP method: no registered hardware
// type has driver-level vendor methods.
func (h *Handler) vendorCall(c echo.Context) error {
	if err := node.CheckArgs(c, nil, "method"); err != nil {
		return httpErr(err)
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:driver:vendor_passthru"); err != nil {
		return err
	}
	method := c.Param("method")
	if method == "" {
		method = c.QueryParam("method")
	}
	if method == "" {
		return web.BadRequest("Missing mandatory parameter: method")
	}
	if err := h.served(c.Request().Context(), c.Param("name")); err != nil {
		return err
	}
	return web.BadRequest("No handler for method %s", method)
}

// httpErr turns node's argument errors into responses.
func httpErr(err error) error {
	if ne, ok := err.(*node.Error); ok {
		return ne.HTTP()
	}
	return err
}
