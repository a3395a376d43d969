package webtest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/auth"
)

// CallerHeader names, in a test request, which of the callers given to
// Callers sends it.
const CallerHeader = "X-Test-Caller"

// Callers is a middleware for tests of the access rules: a request whose
// CallerHeader names one of callers carries that caller's credentials, as
// a validated Keystone token of it would (implied roles included); any
// other request carries none.
func Callers(callers map[string]auth.Credentials) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if creds, ok := callers[c.Request().Header.Get(CallerHeader)]; ok {
				c.SetRequest(c.Request().WithContext(auth.WithCredentials(c.Request().Context(), creds)))
			}
			return next(c)
		}
	}
}

// DoJSON sends a request with a JSON body (none when body is "") and the
// headers hdr, and returns the status, the decoded JSON answer (nil when
// empty) and its text, failing t on a transport error or an answer that is
// not JSON.
func DoJSON(t testing.TB, method, url string, hdr map[string]string, body string) (int, map[string]any, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp.StatusCode, out, string(raw)
}
