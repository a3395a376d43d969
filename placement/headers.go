package placement

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
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
