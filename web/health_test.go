package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestHealth: /healthz is 200 while serving; /readyz runs every check and
// is 503 naming the failing one, with Retry-After; both are answered in front of the wrapped
// handler (which here refuses everything, as an authenticating API would),
// for GET and HEAD only; other paths reach the handler.
func TestHealth(t *testing.T) {
	t.Parallel()
	var dbErr error
	refuse := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	h := Health(refuse,
		Check{Name: "database", Func: func(context.Context) error { return dbErr }},
		Check{Name: "conductor", Func: func(context.Context) error { return nil }})
	retryAfter := ""
	get := func(method, path string) (int, HealthBody) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		var b HealthBody
		if rec.Body.Len() > 0 && rec.Code != http.StatusUnauthorized && rec.Code != http.StatusMethodNotAllowed {
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b))
		}
		retryAfter = rec.Header().Get("Retry-After")
		return rec.Code, b
	}
	code, b := get("GET", HealthzPath)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, HealthBody{Status: "ok"}, b)
	code, b = get("GET", ReadyzPath)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, HealthBody{Status: "ok", Checks: map[string]string{"database": "ok", "conductor": "ok"}}, b)
	require.Empty(t, retryAfter, "a 200 says nothing of retrying")

	dbErr = errors.New("database schema is outdated: database is at version 3, this binary needs 4")
	code, b = get("GET", ReadyzPath)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, HealthBody{Status: "unavailable", Checks: map[string]string{"database": dbErr.Error(), "conductor": "ok"}}, b)
	require.Equal(t, "2", retryAfter)
	code, _ = get("GET", HealthzPath)
	require.Equal(t, http.StatusOK, code, "liveness does not depend on the database")
	code, _ = get("HEAD", ReadyzPath)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "2", retryAfter)
	code, _ = get("POST", HealthzPath)
	require.Equal(t, http.StatusMethodNotAllowed, code)
	code, _ = get("GET", "/v1/nodes")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get("GET", "/healthz/x")
	require.Equal(t, http.StatusUnauthorized, code)
}

// TestAccessLogReason: the log line of a 4xx answer carries the reason the
// client was given (Ironic's and Placement's errors, echo's routing
// errors); 2xx lines carry none.
func TestAccessLogReason(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	ironic, placement := echo.New(), echo.New()
	ironic.HTTPErrorHandler, placement.HTTPErrorHandler = IronicErrorHandler, PlacementErrorHandler
	for _, e := range []*echo.Echo{ironic, placement} {
		e.Use(RequestID(zap.New(core)), AccessLog())
	}
	ironic.GET("/ironic", func(echo.Context) error { return BadRequest("Expected UUID for node_uuid: r1-rack01-n2") })
	ironic.GET("/ok", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	placement.GET("/placement", func(echo.Context) error {
		return PlacementErr(http.StatusConflict, "placement.concurrent_update", "resource provider generation conflict")
	})
	for _, path := range []string{"/ironic", "/missing", "/ok"} {
		ironic.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}
	placement.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/placement", nil))
	reasons := map[string]any{}
	for _, entry := range logs.All() {
		f := entry.ContextMap()
		if path, ok := f["path"].(string); ok {
			reasons[path] = f["reason"]
		}
	}
	require.Equal(t, map[string]any{
		"/ironic":    "Expected UUID for node_uuid: r1-rack01-n2",
		"/placement": "resource provider generation conflict",
		"/missing":   "The resource could not be found.",
		"/ok":        nil,
	}, reasons)
}
