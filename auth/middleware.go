package auth

import (
	"strconv"

	"github.com/labstack/echo/v4"
)

// Middleware authenticates every request with a, except those skip
// reports (e.g. the version documents, which Ironic and Placement serve
// without a token), and stores the credentials in the request's context
// (FromContext). A refusal is handed to fail, which renders it in the
// API's own error format; fail must set the WWW-Authenticate challenge of
// a 401.
func Middleware(a Authenticator, skip func(echo.Context) bool, fail func(echo.Context, *Failure) error) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if skip != nil && skip(c) {
				return next(c)
			}
			r := c.Request()
			creds, err := a.Authenticate(r.Context(), r)
			if err != nil {
				if f, ok := AsFailure(err); ok {
					if f.RetryAfter > 0 {
						c.Response().Header().Set("Retry-After", strconv.Itoa(f.RetryAfter))
					}
					return fail(c, f)
				}
				return err
			}
			c.SetRequest(r.WithContext(WithCredentials(r.Context(), creds)))
			return next(c)
		}
	}
}
