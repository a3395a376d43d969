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
func Auth() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			token := c.Request().Header.Get("X-Auth-Token")
			user, _, _ := strings.Cut(token, ":")
			switch user {
			case "":
				return web.PlacementErr(http.StatusUnauthorized, "",
					"The request you have made requires authentication.")
			case "admin":
				return next(c)
			default:
				return web.PlacementErr(http.StatusForbidden, "",
					"Policy does not allow %s %s to be performed.", c.Request().Method, c.Path())
			}
		}
	}
}
