package node

import (
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/driver"
	"github.com/metalloc/metalloc/web"
)

// The node routes answered by a node's hardware interfaces (package
// driver): validate, RAID, boot devices, indicators and vendor methods. A
// node whose hardware type no metalloc conductor serves (imported from an
// inventory) is Ironic's NoValidHost, as its hash ring answers; an
// interface without the feature is Ironic's UnsupportedDriverExtension.

// hardwareOf returns n's hardware type, or Ironic's NoValidHost (400).
func hardwareOf(n *Node) (*driver.HardwareType, error) {
	ht, ok := driver.Lookup(n.Driver)
	if !ok {
		return nil, web.BadRequest("No valid host was found. Reason: No conductor service registered which supports driver %s for conductor group \"%s\".",
			n.Driver, n.ConductorGroup)
	}
	return ht, nil
}

// impl is n's implementation of interface type t ("raid": raid_interface).
func (n *Node) impl(t string) string { return n.Interfaces[t+"_interface"] }

// validateNode is GET /nodes/{ident}/validate and GET
// /nodes/validate?node={ident} (NodesController.validate): each interface's
// result, with a reason when it fails. The identifier is the argument node
// (uuid or name; a name below 1.5 is 406) or node_uuid.
func (h *Handler) validateNode(c echo.Context) error {
	q := c.QueryParams()
	if err := checkArgs(c, nil, "node", "node_uuid"); err != nil {
		return apiError(err, "")
	}
	ident := c.Param("ident")
	if ident != "" {
		ident = web.PathIdent(c)
	} else {
		ident = q.Get("node")
	}
	if ident != "" && !isUUIDLike(ident) && !isValidLogicalName(ident) {
		return web.BadRequest("Expected UUID or name for node: %s", ident)
	}
	nodeUUID := q.Get("node_uuid")
	if q.Has("node_uuid") {
		if _, err := parseUUIDArg("node_uuid", nodeUUID); err != nil {
			return apiError(err, "")
		}
	}
	if ident != "" && !isUUIDLike(ident) && !web.RequestVersion(c).AtLeast(1, 5) {
		return notAcceptable().HTTP()
	}
	if nodeUUID != "" {
		ident = nodeUUID
	}
	n, err := h.store.Get(c.Request().Context(), ident)
	if err != nil {
		return apiError(err, ident)
	}
	if err := CheckNode(c, h.opts.Rules, n.Owner, n.Lessee, ident, "baremetal:node:validate"); err != nil {
		return err
	}
	if _, err := hardwareOf(&n); err != nil {
		return err
	}
	ports, err := h.store.q.CountNodePorts(c.Request().Context(), n.ID)
	if err != nil {
		return err
	}
	facts := driver.NodeFacts{UUID: n.UUID.String(), Driver: n.Driver, DriverInfo: n.DriverInfo,
		InstanceInfo: n.InstanceInfo, TargetRAIDConfig: n.TargetRaidConfig, Ports: int(ports)}
	out := map[string]any{}
	for _, t := range driver.ValidatedInterfaces {
		r := driver.Validate(facts, t, n.impl(t))
		doc := map[string]any{"result": r.Result}
		if !r.Result {
			doc["reason"] = r.Reason
		}
		out[t] = doc
	}
	return c.JSON(http.StatusOK, out)
}

// raid answers PUT /nodes/{ident}/states/raid (set_target_raid_config): an
// empty configuration clears target_raid_config with any RAID interface; a
// RAID interface that takes configurations (fake, agent) checks it against
// Ironic's RAID schema (400) and stores it; without one it is Ironic's
// UnsupportedDriverExtension, which this route answers with 404.
func (h *Handler) raid(c echo.Context, n *Node, cfg map[string]any) error {
	if _, err := hardwareOf(n); err != nil {
		return err
	}
	if len(cfg) > 0 {
		if !driver.SupportsRAID(n.impl("raid")) {
			return unsupported(http.StatusNotFound, n, "raid")
		}
		if err := driver.ValidateRAIDConfig(cfg); err != nil {
			return web.BadRequest("%s", err.Message)
		}
	}
	if _, err := h.store.SetTargetRAIDConfig(c.Request().Context(), n.UUID.String(), cfg); err != nil {
		return apiError(err, n.UUID.String())
	}
	return c.NoContent(http.StatusNoContent)
}

// fakeManagement checks that n's management interface answers boot device
// and indicator requests: fake does (as Ironic's fake management: the
// device is always pxe, not persistent); others would need the BMC, which
// metalloc does not drive, and answer as Ironic does for a hardware type
// without the method (UnsupportedDriverExtension naming what).
func fakeManagement(n *Node, what string) error {
	if _, err := hardwareOf(n); err != nil {
		return err
	}
	if n.impl("management") != "fake" {
		return unsupported(http.StatusBadRequest, n, what)
	}
	return nil
}

// bootDevices are the boot devices fake management supports.
var bootDevices = []string{"pxe"}

func (h *Handler) getBootDevice(c echo.Context, n *Node, _ map[string]any) error {
	if err := fakeManagement(n, "management"); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"boot_device": bootDevices[0], "persistent": false})
}

func (h *Handler) setBootDevice(c echo.Context, n *Node, body map[string]any) error {
	if err := fakeManagement(n, "management"); err != nil {
		return err
	}
	if d := pyReprPlain(body["boot_device"]); !slices.Contains(bootDevices, d) {
		return web.BadRequest("Invalid boot device %s specified.", d)
	}
	return c.NoContent(http.StatusNoContent)
}

func (h *Handler) supportedBootDevices(c echo.Context, n *Node, _ map[string]any) error {
	if err := fakeManagement(n, "management"); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"supported_boot_devices": bootDevices})
}

// indicator is one of fake management's indicators.
type indicator struct {
	name, component string
	readonly        bool
	states          []string
}

// fakeIndicators are fake management's indicators, in Ironic's order.
var fakeIndicators = []indicator{
	{"led-0", "chassis", true, []string{"off", "on"}},
	{"led", "system", false, []string{"blinking", "off", "on"}},
}

func (h *Handler) listIndicators(c echo.Context, n *Node, _ map[string]any) error {
	if err := fakeManagement(n, "get_supported_indicators"); err != nil {
		return err
	}
	base := h.base(c)
	ident := web.PathIdent(c)
	out := []map[string]any{}
	for _, ind := range fakeIndicators {
		name := ind.name + "@" + ind.component
		path := "/nodes/" + ident + "/management/indicators/" + name
		out = append(out, map[string]any{
			"name": name, "component": ind.component, "readonly": ind.readonly, "states": ind.states,
			"links": []web.Link{{Href: base + "/v1" + path, Rel: "self"}, {Href: base + path, Rel: "bookmark"}},
		})
	}
	return c.JSON(http.StatusOK, map[string]any{"indicators": out})
}

// indicatorName splits "<name>@<component>" (Ironic's IndicatorAtComponent).
func indicatorName(unique string) (name, component string, err error) {
	i := strings.Index(unique, "@")
	if i < 0 {
		return "", "", web.BadRequest("Malformed indicator name \"%s\"", unique)
	}
	return unique[:i], unique[i+1:], nil
}

func (h *Handler) getIndicator(c echo.Context, n *Node, _ map[string]any) error {
	if err := fakeManagement(n, "get_indicator_state"); err != nil {
		return err
	}
	name, component, err := indicatorName(c.Param("indicator"))
	if err != nil {
		return err
	}
	known := false
	for _, ind := range fakeIndicators {
		if ind.component == component {
			known = true
			if ind.name == name {
				return c.JSON(http.StatusOK, map[string]any{"state": "on"})
			}
		}
	}
	if !known {
		return web.BadRequest("Invalid component %s specified.", component)
	}
	return web.BadRequest("Invalid indicator %s specified.", name)
}

func (h *Handler) setIndicator(c echo.Context, n *Node, _ map[string]any) error {
	if _, _, err := indicatorName(c.Param("indicator")); err != nil {
		return err
	}
	if _, err := hardwareOf(n); err != nil {
		return err
	}
	// Ironic's fake management reads indicators but cannot set them.
	return unsupported(http.StatusBadRequest, n, "set_indicator_state")
}

// vendorMethod is a vendor passthru method of the fake vendor interface.
type vendorMethod struct {
	name, description string
	async, exclusive  bool
	// want is the value of "bar" the method answers true for.
	want string
}

// fakeVendorMethods are the fake vendor interface's methods (Ironic's
// FakeVendorB: each tests the argument bar and answers whether it is the
// word it wants; only third_method_sync answers in the request).
var fakeVendorMethods = []vendorMethod{
	{"second_method", "Answer whether bar is kazoo", true, true, "kazoo"},
	{"third_method_sync", "Answer whether bar is meow", false, true, "meow"},
	{"fourth_method_shared_lock", "Answer whether bar is woof", true, false, "woof"},
}

// vendorMethods is GET /nodes/{ident}/vendor_passthru/methods.
func (h *Handler) vendorMethods(c echo.Context, n *Node, _ map[string]any) error {
	out := map[string]any{}
	if n.impl("vendor") == "fake" {
		for _, m := range fakeVendorMethods {
			out[m.name] = map[string]any{"http_methods": []string{http.MethodPost}, "async": m.async,
				"description": m.description, "attach": false, "require_exclusive_lock": m.exclusive}
		}
	}
	return c.JSON(http.StatusOK, out)
}

// vendorCall is /nodes/{ident}/vendor_passthru[/{method}] (?method=...):
// the fake vendor interface's methods take POST with {"bar": ...}; async
// ones answer 202 with no body, the synchronous one 200 with its result.
func (h *Handler) vendorCall(c echo.Context, n *Node, _ map[string]any) error {
	name := c.Param("method")
	if name == "" {
		name = c.QueryParam("method")
	}
	if name == "" {
		return web.BadRequest("Missing mandatory parameter: method")
	}
	if _, err := hardwareOf(n); err != nil {
		return err
	}
	i := slices.IndexFunc(fakeVendorMethods, func(m vendorMethod) bool { return m.name == name })
	if n.impl("vendor") != "fake" || i < 0 {
		return web.BadRequest("No handler for method %s", name)
	}
	m := fakeVendorMethods[i]
	if c.Request().Method != http.MethodPost {
		return web.BadRequest("The method %s does not support HTTP %s", name, c.Request().Method)
	}
	body, err := readObject(c)
	if err != nil {
		return err
	}
	for k := range body {
		if k != "bar" {
			return web.BadRequest("Unexpected arguments: %s", k)
		}
	}
	bar, _ := body["bar"].(string)
	if bar == "" {
		return web.BadRequest("Parameter 'bar' not passed to method '%s'.", name)
	}
	if m.async {
		return c.NoContent(http.StatusAccepted)
	}
	return c.JSON(http.StatusOK, bar == m.want)
}
