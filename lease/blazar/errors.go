package blazar

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// Prefix is where Blazar's API is served on metalloc-api: its v1 under
// Prefix + "/v1" (the endpoint to give blazarclient, or to register in
// Keystone's catalog with service type "reservation"), beside Ironic's
// /v1 and metalloc's /v1/leases.
const Prefix = "/reservation"

// ErrorBody is Blazar's error document (its api/v1/utils.py
// render_error_message): error_code, the HTTP status; error_message, what
// went wrong; error_name, which Blazar fills with the status again for
// its own exceptions (blazarclient shows error_message).
func ErrorBody(status int, msg string) map[string]any {
	return map[string]any{"error_code": status, "error_message": msg, "error_name": status}
}

// InPrefix reports whether path is under Prefix.
func InPrefix(path string) bool {
	return path == Prefix || strings.HasPrefix(path, Prefix+"/")
}

// ErrorHandler renders the errors of requests under Prefix in Blazar's
// error body (ErrorBody), whatever raised them (a handler, the router's
// 404 or 405, authentication, a body too large), with the status and
// message web.ClassifyError gives; other requests go to next (Ironic's
// format).
func ErrorHandler(next echo.HTTPErrorHandler) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if !InPrefix(c.Request().URL.Path) {
			next(err, c)
			return
		}
		if c.Response().Committed {
			return
		}
		status, msg := web.ClassifyError(err, web.Logger(c))
		if status == http.StatusServiceUnavailable && c.Response().Header().Get("Retry-After") == "" {
			c.Response().Header().Set("Retry-After", strconv.Itoa(web.UnavailableRetryAfter))
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = c.JSON(status, ErrorBody(status, msg))
	}
}
