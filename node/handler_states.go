package node

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

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
					return invalidf("Invalid configdrive format: %s is not of type 'object'", web.PyRepr(val))
				}
			case "user_data":
			default:
				return invalidf("Invalid configdrive format: Additional properties are not allowed (%s was unexpected)", web.PyStr(k))
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
