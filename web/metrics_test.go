package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

func TestHTTPMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	mw, err := HTTPMetrics(reg)
	require.NoError(t, err)
	_, err = HTTPMetrics(reg)
	require.Error(t, err, "registering twice on one registry must fail")

	e := echo.New()
	e.HTTPErrorHandler = IronicErrorHandler
	e.Use(mw, RequestID(zap.NewNop()), AccessLog())
	e.GET("/metrics", MetricsHandler(reg))
	v1 := e.Group("/v1", IronicVersion())
	v1.GET("/things/:id", func(c echo.Context) error {
		if c.Param("id") == "missing" {
			return NotFound("Thing %s could not be found.", c.Param("id"))
		}
		return c.JSON(http.StatusOK, map[string]string{"id": c.Param("id")})
	})
	v1.POST("/things", func(echo.Context) error {
		return fmt.Errorf("creating: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"})
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)

	do := func(method, path string) int {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, do("GET", "/v1/things/a"))
	require.Equal(t, 200, do("GET", "/v1/things/b"))
	require.Equal(t, 404, do("GET", "/v1/things/missing"))
	require.Equal(t, 503, do("POST", "/v1/things"))
	require.Equal(t, 404, do("GET", "/nowhere/at/all"))
	require.Equal(t, 404, do("BREW", "/v1/things/a"))

	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	text := string(raw)
	for _, want := range []string{
		`metalloc_http_requests_total{method="GET",route="/v1/things/:id",status="200"} 2`,
		`metalloc_http_requests_total{method="GET",route="/v1/things/:id",status="404"} 1`,
		`metalloc_http_requests_total{method="POST",route="/v1/things",status="503"} 1`,
		`metalloc_http_requests_total{method="other",`,
		`metalloc_http_request_duration_seconds_count{method="GET",route="/v1/things/:id"} 3`,
		`metalloc_http_request_duration_seconds_bucket{method="GET",route="/v1/things/:id",le="10"} 3`,
	} {
		require.Contains(t, text, want)
	}
	// Unknown paths are counted under bounded route labels, never their path.
	require.Contains(t, text, `metalloc_http_requests_total{method="GET",route="unmatched",status="404"} 1`)
	require.Contains(t, text, `metalloc_http_requests_total{method="other",route="/v1/*",status="404"} 1`)
	require.NotContains(t, text, "/nowhere")
}

// TestUnavailableIs503 checks that every way a database outage surfaces
// becomes a 503 in Ironic's body, with nothing of the cause in it.
func TestUnavailableIs503(t *testing.T) {
	t.Parallel()
	errs := []error{
		&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"},
		&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"},
		&pgconn.PgError{Code: "57P03", Message: "the database system is shutting down"},
		&pgconn.PgError{Code: "08006", Message: "connection failure"},
		&pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"},
		&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
		&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET},
		fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF),
		pgconn.ErrConnClosed,
		context.DeadlineExceeded,
	}
	for _, err := range errs {
		e := echo.New()
		req := httptest.NewRequest("GET", "/v1/nodes", nil)
		rec := httptest.NewRecorder()
		IronicErrorHandler(fmt.Errorf("listing nodes: %w", err), e.NewContext(req, rec))
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, "%v", err)
		var body map[string]string
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		var inner struct {
			Faultstring string  `json:"faultstring"`
			Faultcode   string  `json:"faultcode"`
			Debuginfo   *string `json:"debuginfo"`
		}
		require.NoError(t, json.Unmarshal([]byte(body["error_message"]), &inner), rec.Body.String())
		require.Equal(t, "Server", inner.Faultcode)
		require.Nil(t, inner.Debuginfo)
		require.Equal(t, "The database is temporarily unavailable; retry later.", inner.Faultstring)
		require.False(t, strings.Contains(rec.Body.String(), "listing nodes"), "no internals in %s", rec.Body.String())
		// When to retry: a PostgreSQL failover lasts seconds.
		require.Equal(t, strconv.Itoa(UnavailableRetryAfter), rec.Header().Get("Retry-After"), "%v", err)

		// Placement's format, the same header.
		req = httptest.NewRequest("GET", "/resource_providers", nil)
		rec = httptest.NewRecorder()
		PlacementErrorHandler(fmt.Errorf("listing providers: %w", err), e.NewContext(req, rec))
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, "%v", err)
		var pbody struct {
			Errors []struct {
				Status int
				Detail string
			}
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &pbody), rec.Body.String())
		require.Len(t, pbody.Errors, 1, rec.Body.String())
		require.Equal(t, http.StatusServiceUnavailable, pbody.Errors[0].Status)
		require.Equal(t, "The database is temporarily unavailable; retry later.", pbody.Errors[0].Detail)
		require.Equal(t, strconv.Itoa(UnavailableRetryAfter), rec.Header().Get("Retry-After"), "%v", err)
	}
	// Other errors say nothing of retrying.
	rec := httptest.NewRecorder()
	IronicErrorHandler(NotFound("no such node"), echo.New().NewContext(httptest.NewRequest("GET", "/v1/nodes/x", nil), rec))
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Empty(t, rec.Header().Get("Retry-After"))
}
