package port_test

import (
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/auth/policy"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/port"
	"github.com/metalloc/metalloc/web/ironictest"
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
	srv  *ironictest.Ironic
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
	caller := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if creds, ok := callers[c.Request().Header.Get("X-Test-Caller")]; ok {
				c.SetRequest(c.Request().WithContext(auth.WithCredentials(c.Request().Context(), creds)))
			}
			return next(c)
		}
	}
	srv := ironictest.NewIronicWith(t, []echo.MiddlewareFunc{caller},
		node.NewHandler(node.NewStore(pool), nil, node.HandlerOptions{PublicEndpoint: ironictest.Base, MaxLimit: 100, Rules: rules}).Register,
		port.NewHandler(port.NewStore(pool), port.HandlerOptions{PublicEndpoint: ironictest.Base, MaxLimit: 100, Rules: rules}).Register)
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
	var h http.Header
	if r.caller != "" {
		h = http.Header{"X-Test-Caller": {r.caller}}
	}
	out := e.srv.With(e.t).DoWith(r.method, r.path, r.version, h, r.body)
	return response{status: out.Status, header: out.Header, raw: out.Raw, body: out.Body}
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
