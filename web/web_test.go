package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Version{"1.60": {1, 60}, "latest": IronicMaxVersion, "LATEST": IronicMaxVersion, "2.0": {2, 0}} {
		v, ok := ParseVersion(in, IronicMaxVersion)
		require.True(t, ok, in)
		require.Equal(t, want, v, in)
	}
	for _, in := range []string{"", "1", "1.x", "1.2.3", "-1.2", "abc"} {
		_, ok := ParseVersion(in, IronicMaxVersion)
		require.False(t, ok, in)
	}
	require.True(t, Version{1, 60}.AtLeast(1, 52))
	require.False(t, Version{1, 51}.AtLeast(1, 52))
}

func TestIronicVersionNegotiation(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.HTTPErrorHandler = IronicErrorHandler
	e.Use(RequestID(zap.NewNop()))
	e.GET("/v1/x", func(c echo.Context) error { return c.String(200, RequestVersion(c).String()) }, IronicVersion())
	cases := []struct {
		header, body, version string
		status                int
	}{
		{"", "1.1", "1.1", 200},
		{"1.60", "1.60", "1.60", 200},
		{"latest", "1.82", "1.82", 200},
		{"1.83", "", "", 406},
		{"1.0", "", "", 406},
		{"2.1", "", "", 406},
		{"junk", "", "", 406},
	}
	for _, c := range cases {
		req := httptest.NewRequest("GET", "/v1/x", nil)
		if c.header != "" {
			req.Header.Set(IronicVersionHeader, c.header)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		require.Equal(t, c.status, rec.Code, c.header)
		require.Equal(t, c.version, rec.Header().Get(IronicVersionHeader), c.header)
		require.NotEmpty(t, rec.Header().Get(RequestIDHeader))
		if c.status == 200 {
			require.Equal(t, c.body, rec.Body.String())
			continue
		}
		var body map[string]string
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		var fault map[string]any
		require.NoError(t, json.Unmarshal([]byte(body["error_message"]), &fault))
		require.Equal(t, "Client", fault["faultcode"])
		require.Nil(t, fault["debuginfo"])
		require.NotEmpty(t, fault["faultstring"])
	}
}

func TestClassifyErrorHidesInternals(t *testing.T) {
	t.Parallel()
	status, msg := ClassifyError(echo.ErrNotFound, zap.NewNop())
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "The resource could not be found.", msg)
	status, msg = ClassifyError(errSecret{}, zap.NewNop())
	require.Equal(t, http.StatusInternalServerError, status)
	require.NotContains(t, msg, "secret")
}

type errSecret struct{}

func (errSecret) Error() string { return "secret internals" }

func TestNextLinkAndTimestamp(t *testing.T) {
	t.Parallel()
	require.Empty(t, NextLink("http://h", "nodes", 2, 3, "u", nil))
	require.Equal(t, "http://h/v1/nodes?state=a+b&limit=2&marker=u",
		NextLink("http://h", "nodes", 2, 2, "u", url.Values{"state": {"a b"}}))
	ts := time.Date(2026, 11, 22, 2, 20, 34, 123456000, time.UTC)
	require.Equal(t, "2026-11-22T02:20:34.123456+00:00", Timestamp(&ts))
	ts = ts.Truncate(time.Second)
	require.Equal(t, "2026-11-22T02:20:34+00:00", Timestamp(&ts))
	require.Nil(t, Timestamp(nil))
}

func TestValidLogicalName(t *testing.T) {
	t.Parallel()
	require.True(t, ValidLogicalName("node-1.rack_2~x", Version{1, 82}))
	require.False(t, ValidLogicalName("node 1", Version{1, 82}))
	require.False(t, ValidLogicalName("Node_1", Version{1, 9}))
	require.True(t, ValidLogicalName("node-1", Version{1, 9}))
}
