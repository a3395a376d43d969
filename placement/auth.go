package placement

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// Auth is noauth2-style authentication, as Placement's own test set-ups use
// (auth_strategy = noauth2): a request without X-Auth-Token gets 401; the
// token is "user[:project]", and user "admin" is an administrator, who may
// do everything; any other user gets 403, since every Placement policy
// defaults to admin-only. Real authentication (Keystone) comes later.
//
// Auth is Authenticate followed by Authorize; Register runs microversion
// negotiation between the two, as Placement does (its 401 comes from the
// outer auth middleware, without microversion headers; its 403 from the
// handlers' policy checks, with them).
func Auth() echo.MiddlewareFunc {
	authn, authz := Authenticate(), Authorize()
	return func(next echo.HandlerFunc) echo.HandlerFunc { return authn(authz(next)) }
}

// isRootPath reports whether the request is for the version document,
// which Placement serves without authentication.
func isRootPath(c echo.Context) bool {
	p := c.Request().URL.Path
	return p == "/" || p == ""
}

// Authenticate answers 401 (web.PlacementUnauthorized) to a request without
// X-Auth-Token, except for the version document at "/".
func Authenticate() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !isRootPath(c) && c.Request().Header.Get("X-Auth-Token") == "" {
				return web.PlacementUnauthorized()
			}
			return next(c)
		}
	}
}

// Authorize lets user "admin" do everything and answers 403 to anybody
// else. The refusal is raised past microversion negotiation, as Placement's
// policy errors are (version header, no Vary). Unknown routes are not
// policy-checked: they stay 404, as in Placement.
func Authorize() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			token := c.Request().Header.Get("X-Auth-Token")
			user, _, _ := strings.Cut(token, ":")
			if user == "admin" || user == "" || isRootPath(c) || c.Path() == "" {
				return next(c)
			}
			err := web.PlacementErr(http.StatusForbidden, "",
				"Policy does not allow %s %s to be performed.", c.Request().Method, c.Path())
			err.Raised = true
			return err
		}
	}
}
