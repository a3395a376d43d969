package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

// TestCrossSiteWritesRefused sends what a browser sends when a page of
// another site submits a form (or a script without CORS preflight posts)
// to metalloc-api, which trusts the caller (noauth on loopback, or
// http_basic credentials the browser remembers): nothing changes. A
// text/plain form can carry a JSON document (<input name='{"driver":
// "fake-hardware", "extra": {"k": "' value='"}}'>); without the Sec-Fetch-Site and
// Origin headers (an old browser, or curl) it is still refused because it
// is not JSON. API clients, which send application/json and no Origin,
// and the page at /ui/ (same-origin) go through.
func TestCrossSiteWritesRefused(t *testing.T) {
	t.Parallel()
	pool, srv := noauthAPI(t, nil)
	// A live conductor serving fake-hardware: nodes can be created.
	dbtest.Conductor(t, pool, "conductor-1", 0, true)
	self := srv.URL // the API's own origin, http://127.0.0.1:port

	formBody := `{"driver": "fake-hardware", "extra": {"k": "="}}`
	post := func(path, body string, hdr ...string) (int, string) {
		st, _, raw := webtest.Do(t, http.MethodPost, srv.URL+path, body, hdr...)
		return st, web.IronicFaultString(raw)
	}
	browser := func(ct, origin, site string) []string {
		h := []string{"Content-Type", ct, "Origin", origin}
		if site != "" {
			h = append(h, "Sec-Fetch-Site", site, "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document")
		}
		return h
	}
	for _, c := range []struct {
		name   string
		hdr    []string
		status int
		msg    string
	}{
		{"text/plain form from another site", browser("text/plain", "http://evil.example", "cross-site"), 403, web.CrossSiteMessage},
		{"urlencoded form from another site", browser("application/x-www-form-urlencoded", "http://evil.example", "cross-site"), 403, web.CrossSiteMessage},
		{"JSON from a sibling origin", browser("application/json", "http://evil.127.0.0.1.nip.io", "same-site"), 403, web.CrossSiteMessage},
		{"old browser: Origin only", browser("text/plain", "http://evil.example", ""), 403, web.CrossSiteMessage},
		{"old browser: Origin null", browser("text/plain", "null", ""), 403, web.CrossSiteMessage},
		{"text/plain without Origin", []string{"Content-Type", "text/plain"}, 415,
			"The media type text/plain is not supported, use application/json"},
		{"multipart", []string{"Content-Type", "multipart/form-data; boundary=x"}, 415,
			"The media type multipart/form-data is not supported, use application/json"},
		{"no Content-Type", nil, 415, "The media type None is not supported, use application/json"},
		{"text/plain from the page itself", browser("text/plain", self, "same-origin"), 415,
			"The media type text/plain is not supported, use application/json"},
	} {
		st, msg := post("/v1/nodes", formBody, c.hdr...)
		require.Equal(t, c.status, st, c.name)
		require.Equal(t, c.msg, msg, c.name)
	}
	// Ports too, and a bodiless POST from another site.
	st, _ := post("/v1/ports", `{"address": "52:54:00:00:00:01", "node_uuid": "x", "extra": {"k": "="}}`, browser("text/plain", "http://evil.example", "cross-site")...)
	require.Equal(t, http.StatusForbidden, st)
	st, _ = post("/v1/nodes/any/states/provision", "", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, st)
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM nodes`), "nothing was created")

	// What clients send goes through: JSON without Origin, the page's own
	// origin, and the same with an explicit default port.
	for i, hdr := range [][]string{
		{"Content-Type", "application/json"},
		{"Content-Type", "application/json; charset=UTF-8", "X-OpenStack-Ironic-API-Version", "1.82"},
		browser("application/json", self, "same-origin"),
		{"Content-Type", "application/json", "Origin", self},
	} {
		st, msg := post("/v1/nodes", `{"driver": "fake-hardware"}`, hdr...)
		require.Equal(t, http.StatusCreated, st, "%d: %s", i, msg)
	}
	// PATCH with the JSON patch media type.
	req, _ := http.NewRequest(http.MethodPatch, srv.URL+"/v1/nodes/"+firstNode(t, srv.URL), strings.NewReader(`[{"op":"add","path":"/extra/a","value":1}]`))
	req.Header.Set("Content-Type", "application/json-patch+json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestUISecurityHeaders: the operator page forbids framing, sniffing,
// inline scripts and other origins, sends no referrer elsewhere, and asks
// for HTTPS only (HSTS) when it is served over HTTPS, here through a
// trusted proxy.
func TestUISecurityHeaders(t *testing.T) {
	t.Parallel()
	_, srv := noauthAPI(t, func(cfg *config.Config) { cfg.API.TrustedProxies = []string{"127.0.0.1"} })
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/nope"} {
		for _, proto := range []string{"", "https"} {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
			if proto != "" {
				req.Header.Set("X-Forwarded-Proto", proto)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			h := resp.Header
			require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
			require.Contains(t, h.Get("Content-Security-Policy"), "script-src 'self'", path)
			require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"), path)
			require.Equal(t, "DENY", h.Get("X-Frame-Options"), path)
			require.Equal(t, "same-origin", h.Get("Referrer-Policy"), path)
			if proto == "https" {
				require.Equal(t, "max-age=31536000", h.Get("Strict-Transport-Security"), path)
			} else {
				require.Empty(t, h.Get("Strict-Transport-Security"), path)
			}
		}
	}
}

// firstNode is the uuid of the first node GET /v1/nodes lists.
func firstNode(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/v1/nodes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var doc struct{ Nodes []struct{ UUID string } }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	require.NotEmpty(t, doc.Nodes)
	return url.PathEscape(doc.Nodes[0].UUID)
}

// noauthAPI serves metalloc-api (noauth, default configuration changed by
// edit when not nil) on a fresh database.
func noauthAPI(t *testing.T, edit func(*config.Config)) (*pgxpool.Pool, *httptest.Server) {
	t.Helper()
	pool := dbtest.New(t)
	cfg, err := config.Load("", nil)
	require.NoError(t, err)
	if edit != nil {
		edit(&cfg)
	}
	e, err := newAPI(cfg, pool, auth.IronicNoAuth{}, auth.Rules{}, nil, zap.NewNop())
	require.NoError(t, err)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return pool, srv
}
