package node

import (
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// traitsIdent is ident for the traits endpoints, which exist from 1.37.
// The identifier's syntax is checked first (Ironic's node _lookup); below
// 1.37 a request then gets what Ironic's routing gives it without the
// sub-controller: 406 for GET, 405 for PUT, 404 for DELETE.
func (h *Handler) traitsIdent(c echo.Context) (string, error) {
	if err := identSyntax(c); err != nil {
		return "", err
	}
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
		return nil, false, invalidf("Schema error for body: %s is not of type 'object'", web.PyRepr(body))
	}
	for k := range m {
		if k != "traits" {
			return nil, false, invalidf("Schema error for body: Additional properties are not allowed (%s was unexpected)", web.PyStr(k))
		}
	}
	raw, ok := m["traits"]
	if !ok {
		return nil, false, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, false, invalidf("Schema error for body: %s is not of type 'array'", web.PyRepr(raw))
	}
	traits := make([]string, 0, len(list))
	for _, t := range list {
		s, ok := t.(string)
		if !ok {
			return nil, false, invalidf("Schema error for body: %s is not of type 'string'", web.PyRepr(t))
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
