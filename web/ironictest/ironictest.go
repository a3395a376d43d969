// Package ironictest serves Ironic handlers in tests (NewIronic) behind
// the plumbing metalloc-api puts in front of them, and sends them requests.
package ironictest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/web"
	"github.com/metalloc/metalloc/web/webtest"
)

// Ironic is a test server for Ironic handlers, behind the plumbing
// metalloc-api puts in front of them (Ironic's error body, request ids and
// microversion negotiation on /v1). Links are built on
// http://metalloc.test:6385.
type Ironic struct {
	t   testing.TB
	srv *httptest.Server
}

// Base is the public endpoint links of an Ironic test server start with.
const Base = "http://metalloc.test:6385"

// NewIronic starts an Ironic test server whose /v1 routes register mounts
// (closed when t ends).
func NewIronic(t testing.TB, register ...func(v1 *echo.Group)) *Ironic {
	t.Helper()
	return NewIronicWith(t, nil, register...)
}

// NewIronicWith is NewIronic with middleware mw run before the routes (a
// test's authentication, say).
func NewIronicWith(t testing.TB, mw []echo.MiddlewareFunc, register ...func(v1 *echo.Group)) *Ironic {
	t.Helper()
	e := echo.New()
	e.HideBanner = true
	e.HTTPErrorHandler = web.IronicErrorHandler
	e.Use(web.RequestID(zap.NewNop()))
	e.Use(mw...)
	v1 := e.Group("/v1", web.IronicVersion())
	for _, r := range register {
		r(v1)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &Ironic{t: t, srv: srv}
}

// With returns s for t (a subtest): its failures and request contexts
// belong to t.
func (s *Ironic) With(t testing.TB) *Ironic {
	c := *s
	c.t = t
	return &c
}

// Response is an answer of the test server.
type Response struct {
	Status int
	Header http.Header
	Raw    []byte
	// Body is the decoded JSON object (nil when the body is not one).
	Body map[string]any
}

// Fault is the faultstring of an Ironic error answer.
func (r Response) Fault(t testing.TB) string {
	t.Helper()
	return webtest.IronicFault(t, r.Body)
}

// Do sends a request at microversion version ("" = no header) with body
// (nil, a string sent as is, or a value encoded as JSON).
func (s *Ironic) Do(method, path, version string, body any) Response {
	s.t.Helper()
	return s.DoWith(method, path, version, nil, body)
}

// DoWith is Do with extra request headers.
func (s *Ironic) DoWith(method, path, version string, header http.Header, body any) Response {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(s.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(s.t.Context(), method, s.srv.URL+path, rd)
	require.NoError(s.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if version != "" {
		req.Header.Set(web.IronicVersionHeader, version)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := s.srv.Client().Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	r := Response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if len(raw) > 0 && raw[0] == '{' {
		require.NoError(s.t, json.Unmarshal(raw, &r.Body), "body: %s", raw)
	}
	return r
}

// Must is Do, requiring status.
func (s *Ironic) Must(status int, method, path, version string, body any) Response {
	s.t.Helper()
	r := s.Do(method, path, version, body)
	require.Equal(s.t, status, r.Status, "%s %s: %s", method, path, r.Raw)
	return r
}
