// Package ui is the operator page of metalloc-api: a read-only fleet view
// served at /ui/ from files embedded in the binary (plain HTML, CSS and
// JavaScript; nothing is built or downloaded, nothing inline, so it works
// under a strict Content-Security-Policy). The page draws the fleet on a
// canvas grouped by extra.row and extra.rack and coloured by state, filling
// its panel: every node of the summary's selection, or one tile per rack or
// one bar per row when there are too many (zooming in on a click);
// free/total bars per resource class and rack, filled with the free share;
// the allocation groups with their members and last_error; the recent
// allocations, members marked with their group, with their last_error
// explained filter by filter; the conductors, alive, dead or stopped; and
// the lease calendar, one row per rack and one column per 6 hours or day
// of the coming week(s), each cell the rack's free nodes and the leases
// holding its nodes then, now marked. It reads only the API it is served
// by, with the browser's credentials: GET /v1/ui/fleet (node.Fleet),
// /v1/ui/conductors, /v1/ui/leases (lease.Calendar), /v1/nodes/{uuid},
// /v1/allocations, /v1/allocation_groups, and GET /v1/allocations/events
// when that answers a text/event-stream (else it polls every few seconds).
package ui

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/labstack/echo/v4"
)

//go:embed static
var static embed.FS

// Files are the page's embedded files (index.html, grid.js, app.js,
// style.css).
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded directory exists at build time
	}
	return sub
}

// Register mounts the page on e: GET /ui (and /ui/, which the API's
// trailing-slash removal turns into /ui) serves index.html, GET /ui/{file}
// the other files (404 in the API's error body for unknown ones). Access
// is whatever e's middleware decides (metalloc-api: auth.Middleware, as
// for the API itself). Every answer carries securityHeaders.
func Register(e *echo.Echo) {
	files := Files()
	assets := http.FileServer(http.FS(files))
	e.GET("/ui", func(c echo.Context) error {
		index, err := fs.ReadFile(files, "index.html")
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-cache")
		return c.HTMLBlob(http.StatusOK, index)
	}, securityHeaders)
	e.GET("/ui/*", func(c echo.Context) error {
		name := c.Param("*")
		if _, err := fs.Stat(files, name); err != nil || name == "" {
			return echo.ErrNotFound
		}
		c.Response().Header().Set("Cache-Control", "no-cache")
		req := c.Request().Clone(c.Request().Context())
		req.URL.Path = "/" + name
		assets.ServeHTTP(c.Response(), req)
		return nil
	}, securityHeaders)
}

// ContentSecurityPolicy is the page's Content-Security-Policy: its own
// scripts, styles and API only (no inline script, no other origin), never
// inside another site's frame, no form posting anywhere else.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// securityHeaders sets the page's browser protections on every /ui answer
// (including errors): ContentSecurityPolicy, no MIME sniffing, no framing
// (X-Frame-Options for browsers without frame-ancestors), no referrer sent
// elsewhere, and, when the page is served over HTTPS (TLS here, or a
// trusted proxy's X-Forwarded-Proto), Strict-Transport-Security for a year.
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		if c.Scheme() == "https" {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		return next(c)
	}
}
