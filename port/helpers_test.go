package port_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/auth/policy"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/port"
	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

// Projects of the access tests.
const (
	ownerProject  = "0wner000000000000000000000000000"
	lesseeProject = "1essee00000000000000000000000000"
	otherProject  = "0ther000000000000000000000000000"
)

// callers are the credentials a test request may carry (X-Test-Caller),
// as a Keystone token of each would (implied roles included).
var callers = map[string]auth.Credentials{
	"system-admin":  {UserID: "sa", Roles: []string{"admin", "member", "reader"}, SystemScope: "all"},
	"system-reader": {UserID: "sr", Roles: []string{"reader"}, SystemScope: "all"},
	"owner-admin":   {UserID: "oa", ProjectID: ownerProject, Roles: []string{"admin", "member", "reader"}},
	"owner":         {UserID: "ow", ProjectID: ownerProject, Roles: []string{"member", "reader"}},
	"lessee":        {UserID: "le", ProjectID: lesseeProject, Roles: []string{"member", "reader"}},
	"other":         {UserID: "ot", ProjectID: otherProject, Roles: []string{"member", "reader"}},
}

// env is one test's system under test: a fresh database and an HTTP
// server with the node and port handlers behind metalloc's Ironic
// middleware.
type env struct {
	t    *testing.T
	pool *pgxpool.Pool
	srv  *httptest.Server
}

// setup starts the handlers, with Ironic's default access rules (scope and
// new defaults enforced) when secure, open otherwise.
func setup(t *testing.T, pool *pgxpool.Pool, secure bool) *env {
	t.Helper()
	var rules auth.Rules
	if secure {
		enf, err := policy.New(policy.IronicDefaults(), policy.Options{EnforceScope: true, EnforceNewDefaults: true})
		require.NoError(t, err)
		rules = auth.Rules{Authorizer: enf, EnforceNewDefaults: true}
	}
	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = web.IronicErrorHandler
	e.Use(web.RequestID(zap.NewNop()))
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if creds, ok := callers[c.Request().Header.Get("X-Test-Caller")]; ok {
				c.SetRequest(c.Request().WithContext(auth.WithCredentials(c.Request().Context(), creds)))
			}
			return next(c)
		}
	})
	v1 := e.Group("/v1", web.IronicVersion())
	opts := node.HandlerOptions{PublicEndpoint: "http://metalloc.test:6385", MaxLimit: 100, Rules: rules}
	node.NewHandler(node.NewStore(pool), nil, opts).Register(v1)
	port.NewHandler(port.NewStore(pool), port.HandlerOptions{
		PublicEndpoint: "http://metalloc.test:6385", MaxLimit: 100, Rules: rules,
	}).Register(v1)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &env{t: t, pool: pool, srv: srv}
}

// response is a decoded HTTP response.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// fault returns the faultstring of an Ironic error body.
func (r response) fault(t *testing.T) string {
	t.Helper()
	return webtest.IronicFault(t, r.body)
}

// req is a request: method, path, microversion ("" = none), caller ("" =
// none), body (nil, a string sent as is, or a value sent as JSON).
type req struct {
	method, path, version, caller string
	body                          any
}

func (e *env) do(r req) response {
	e.t.Helper()
	var rd io.Reader
	switch b := r.body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(e.t, err)
		rd = bytes.NewReader(raw)
	}
	hr, err := http.NewRequestWithContext(e.t.Context(), r.method, e.srv.URL+r.path, rd)
	require.NoError(e.t, err)
	if r.body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.version != "" {
		hr.Header.Set(web.IronicVersionHeader, r.version)
	}
	if r.caller != "" {
		hr.Header.Set("X-Test-Caller", r.caller)
	}
	resp, err := e.srv.Client().Do(hr)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	out := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 && raw[0] == '{' {
		require.NoError(e.t, json.Unmarshal(raw, &out.body), "body: %s", raw)
	}
	return out
}

// must sends r and requires status.
func (e *env) must(status int, r req) response {
	e.t.Helper()
	resp := e.do(r)
	require.Equal(e.t, status, resp.status, "%s %s: %s", r.method, r.path, resp.raw)
	return resp
}

// mustFail sends r and requires status and the fault string.
func (e *env) mustFail(status int, fault string, r req) {
	e.t.Helper()
	resp := e.must(status, r)
	require.Equal(e.t, fault, resp.fault(e.t), "%s %s", r.method, r.path)
}

// items returns the list of key in a collection body.
func items(t *testing.T, body map[string]any, key string) []map[string]any {
	t.Helper()
	raw, ok := body[key].([]any)
	require.True(t, ok, "no %s in %v", key, body)
	out := make([]map[string]any, len(raw))
	for i, x := range raw {
		out[i] = x.(map[string]any)
	}
	return out
}
