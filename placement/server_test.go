package placement

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
)

// testServer is the Placement API on a fresh database, as an httptest server.
func testServer(t *testing.T) *httptest.Server {
	t.Helper()
	pool := dbtest.New(t)
	require.NoError(t, Prepare(t.Context(), pool))
	e := echo.New()
	e.HTTPErrorHandler = web.PlacementErrorHandler
	e.JSONSerializer = web.JSONSerializer{}
	e.Use(web.RequestID(zaptest.NewLogger(t)))
	NewHandler(pool, Options{}).Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

// call sends method path with body (JSON text, "" for none) at microversion
// version ("" for none) as admin, and returns the status, headers and
// decoded body (nil when empty).
func call(t *testing.T, srv *httptest.Server, method, path, version, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Auth-Token", "admin")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if version != "" {
		req.Header.Set("OpenStack-API-Version", "placement "+version)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	if resp.ContentLength != 0 {
		_ = json.NewDecoder(resp.Body).Decode(&out)
	}
	return resp.StatusCode, resp.Header, out
}

func TestRootAndVersionNegotiation(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	status, h, body := call(t, srv, "GET", "/", "", "")
	require.Equal(t, 200, status)
	require.Equal(t, "placement 1.0", h.Get("OpenStack-API-Version"))
	require.Contains(t, h.Values("Vary"), "OpenStack-API-Version")
	v := body["versions"].([]any)[0].(map[string]any)
	require.Equal(t, "1.39", v["max_version"])
	require.Equal(t, "1.0", v["min_version"])

	status, h, _ = call(t, srv, "GET", "/", "latest", "")
	require.Equal(t, 200, status)
	require.Equal(t, "placement 1.39", h.Get("OpenStack-API-Version"))
	require.Equal(t, "no-cache", h.Get("Cache-Control"))
	require.NotEmpty(t, h.Get("Last-Modified"))

	status, _, body = call(t, srv, "GET", "/", "1.40", "")
	require.Equal(t, 406, status)
	e := body["errors"].([]any)[0].(map[string]any)
	require.EqualValues(t, 406, e["status"])
	require.Equal(t, "1.39", e["max_version"])

	status, _, _ = call(t, srv, "GET", "/", "one.two", "")
	require.Equal(t, 400, status)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	req, err := http.NewRequest("GET", srv.URL+"/resource_providers", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 401, resp.StatusCode)
	req.Header.Set("X-Auth-Token", "demo:demo")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 403, resp.StatusCode)
}
