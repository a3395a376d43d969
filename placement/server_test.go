package placement

import (
	"encoding/json"
	"io"
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
	require.Contains(t, h.Values("Vary"), "openstack-api-version")
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

// callRaw sends method path with the given headers (X-Auth-Token: admin
// unless set) and body, and returns the status, headers and raw body.
func callRaw(t *testing.T, srv *httptest.Server, method, path string, hdr map[string]string, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Auth-Token", "admin")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var sb strings.Builder
	_, _ = io.Copy(&sb, resp.Body)
	return resp.StatusCode, resp.Header, sb.String()
}

// TestConformanceHeaders pins what scripts/placement-compare.py found
// Placement 8.0 doing with headers around errors.
func TestConformanceHeaders(t *testing.T) {
	t.Parallel()
	srv := testServer(t)
	ver := func(v string) map[string]string { return map[string]string{"OpenStack-API-Version": "placement " + v} }

	// Failed negotiation: neither the version header nor Vary.
	for _, v := range []string{"1.40", "0.9", "1.a"} {
		st, h, _ := callRaw(t, srv, "GET", "/", ver(v), "")
		require.Contains(t, []int{400, 406}, st, v)
		require.Empty(t, h.Get("OpenStack-API-Version"), v)
		require.Empty(t, h.Values("Vary"), v)
	}

	// 401 comes from outside negotiation, in the generic error document.
	st, h, body := callRaw(t, srv, "GET", "/resource_providers", map[string]string{"X-Auth-Token": ""}, "")
	require.Equal(t, 401, st)
	require.Empty(t, h.Get("OpenStack-API-Version"))
	require.Empty(t, h.Values("Vary"))
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	require.Equal(t, "401 Unauthorized", doc["code"])
	require.Equal(t, "Unauthorized", doc["title"])
	require.NotEmpty(t, doc["message"])

	// 403 is raised past negotiation: version header, no Vary.
	st, h, _ = callRaw(t, srv, "GET", "/resource_providers", map[string]string{"X-Auth-Token": "demo:demo"}, "")
	require.Equal(t, 403, st)
	require.Equal(t, "placement 1.0", h.Get("OpenStack-API-Version"))
	require.Empty(t, h.Values("Vary"))

	// Unknown route: 404 with version header, no Vary.
	st, h, _ = callRaw(t, srv, "GET", "/nonexistent", ver("1.39"), "")
	require.Equal(t, 404, st)
	require.Equal(t, "placement 1.39", h.Get("OpenStack-API-Version"))
	require.Empty(t, h.Values("Vary"))

	// Unknown provider (NotFound raised by Placement's object): no Vary;
	// for GET /resource_providers/{uuid}/traits the handler catches it.
	st, h, _ = callRaw(t, srv, "GET", "/resource_providers/"+rpU4, ver("1.39"), "")
	require.Equal(t, 404, st)
	require.Empty(t, h.Values("Vary"))
	st, h, _ = callRaw(t, srv, "GET", "/resource_providers/"+rpU4+"/traits", ver("1.39"), "")
	require.Equal(t, 404, st)
	require.Contains(t, h.Values("Vary"), "openstack-api-version")

	// Known route, other method: 405 with Allow (no OPTIONS), Vary kept;
	// OPTIONS itself is 405 too.
	for _, m := range []string{"PATCH", "DELETE", "OPTIONS"} {
		st, h, body = callRaw(t, srv, m, "/resource_providers", ver("1.39"), "")
		require.Equal(t, 405, st, m)
		require.Equal(t, "placement 1.39", h.Get("OpenStack-API-Version"))
		require.Contains(t, h.Values("Vary"), "openstack-api-version")
		require.ElementsMatch(t, []string{"GET", "POST"}, strings.Split(strings.ReplaceAll(h.Get("Allow"), " ", ""), ","), m)
		if m != "OPTIONS" {
			require.Contains(t, body, "Method Not Allowed")
		}
	}

	// Accept admitting no JSON: 406 in plain text; JSON-admitting ones pass.
	st, h, body = callRaw(t, srv, "GET", "/resource_providers", map[string]string{"Accept": "text/plain"}, "")
	require.Equal(t, 406, st)
	require.True(t, strings.HasPrefix(h.Get("Content-Type"), "text/plain"))
	require.Contains(t, body, "Only application/json is provided")
	for _, a := range []string{"application/json", "*/*", "text/html, application/json;q=0.5", "application/*"} {
		st, _, _ = callRaw(t, srv, "GET", "/resource_providers", map[string]string{"Accept": a}, "")
		require.Equal(t, 200, st, a)
	}
	st, _, _ = callRaw(t, srv, "GET", "/resource_providers", map[string]string{"Accept": "application/json;q=0"}, "")
	require.Equal(t, 406, st)
}
