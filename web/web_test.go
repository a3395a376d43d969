package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// TestBadValuesInTheAPIsWords: a value PostgreSQL refuses, or a number no
// float64 holds, is a 400 that says what is wrong without PostgreSQL's
// text or Go's type names.
func TestBadValuesInTheAPIsWords(t *testing.T) {
	t.Parallel()
	for code, pgMsg := range map[string]string{
		"22021": `invalid byte sequence for encoding "UTF8": 0x00`,
		"22P05": "unsupported Unicode escape sequence",
		"22003": "value out of range for type integer",
		"22001": "value too long for type character varying(255)",
		"22P02": `invalid input syntax for type uuid: "x"`,
		"22012": "division by zero",
	} {
		err := fmt.Errorf("inserting: %w", &pgconn.PgError{Code: code, Message: pgMsg})
		status, msg := ClassifyError(err, zap.NewNop())
		require.Equal(t, http.StatusBadRequest, status, code)
		require.NotContains(t, msg, pgMsg, code)
		require.NotContains(t, msg, "UTF8", code)
		require.True(t, strings.HasPrefix(msg, "Invalid value in request: "), msg)
	}

	var f float64
	var n struct{ Count int32 }
	var s struct{ Name string }
	for body, want := range map[string]string{
		`1e400`:            "number 1e400 is out of range",
		`{"Count": 1e10}`:  "number 1e10 at Count is not an integer in range",
		`{"Count": 1.5}`:   "number 1.5 at Count is not an integer in range",
		`{"Name": [1]}`:    "expected a string at Name, got array",
		`{"Name": "x"`:     "unexpected end of JSON input",
		`{"Name": "x"} x{`: "invalid character 'x' after top-level value",
	} {
		var dst any = &f
		switch {
		case strings.Contains(body, "Count"):
			dst = &n
		case strings.Contains(body, "Name"):
			dst = &s
		}
		err := json.Unmarshal([]byte(body), dst)
		require.Error(t, err, body)
		got := JSONProblem(err)
		require.Equal(t, want, got, body)
		require.NotContains(t, got, "Go ", body)
	}

	sch := MustSchema("thing", []byte(`{"type": "object"}`))
	_, err := sch.Decode([]byte(`{"extra": {"a": [1, 1e400]}}`))
	require.EqualError(t, err, "400: Invalid JSON in request body: number 1e400 at /extra/a/1 is out of range")
}
