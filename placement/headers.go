package placement

import (
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// setCacheHeaders sets what Placement sends from microversion 1.15 on GET
// responses: "cache-control: no-cache" and last-modified (the newest
// timestamp of the objects shown; now when none is given).
func setCacheHeaders(c echo.Context, lastModified *time.Time) {
	h := c.Response().Header()
	h.Set("Cache-Control", "no-cache")
	t := time.Now().UTC()
	if lastModified != nil && !lastModified.IsZero() {
		t = lastModified.UTC()
	}
	h.Set("Last-Modified", t.Format(http.TimeFormat))
}

// checkAccept is Placement's check_accept("application/json") for the GET
// handlers that have it: an Accept header that admits no JSON (no
// application/json, application/* or */* range with q > 0) is 406 "Only
// application/json is provided". No Accept header, an empty one or one that
// does not parse admits everything.
func checkAccept(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a := strings.TrimSpace(c.Request().Header.Get("Accept")); a != "" && !web.AcceptsJSON(a) {
			return web.PlacementErr(http.StatusNotAcceptable, "", "Only application/json is provided")
		}
		return next(c)
	}
}
