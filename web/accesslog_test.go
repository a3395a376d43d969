package web

import (
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

// TestAccessLogLevels: one line per request at the level and with the
// message AccessLog documents, the request id and the 4xx reason on it;
// a successful GET at Debug, which the default level (Info) drops.
func TestAccessLogLevels(t *testing.T) {
	t.Parallel()
	for _, level := range []zapcore.Level{zapcore.InfoLevel, zapcore.DebugLevel} {
		core, logs := observer.New(level)
		e := echo.New()
		e.HTTPErrorHandler = IronicErrorHandler
		e.Use(RequestID(zap.New(core)), AccessLog())
		e.GET("/ok", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
		e.POST("/ok", func(c echo.Context) error { return c.String(http.StatusCreated, "ok") })
		e.GET("/missing", func(c echo.Context) error { return NotFound("Thing %s could not be found.", "x") })
		e.GET("/down", func(c echo.Context) error { return echo.NewHTTPError(http.StatusServiceUnavailable, "down") })
		e.GET("/broken", func(c echo.Context) error { return errors.New("boom") })
		for _, r := range []struct{ method, path string }{
			{"GET", "/ok"}, {"POST", "/ok"}, {"GET", "/missing"}, {"GET", "/down"}, {"GET", "/broken"},
		} {
			e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(r.method, r.path, nil))
		}
		type line struct {
			level        zapcore.Level
			msg, path    string
			status       int64
			reason       string
			hasRequestID bool
		}
		var got []line
		for _, l := range logs.FilterFieldKey("path").All() {
			m := l.ContextMap()
			reason, _ := m["reason"].(string)
			_, id := m["request_id"]
			got = append(got, line{l.Level, l.Message, m["path"].(string), m["status"].(int64), reason, id})
		}
		want := []line{
			{zapcore.InfoLevel, "request", "/ok", 201, "", true},
			{zapcore.InfoLevel, "request rejected", "/missing", 404, "Thing x could not be found.", true},
			{zapcore.WarnLevel, "request unavailable", "/down", 503, "", true},
			{zapcore.ErrorLevel, "request failed", "/broken", 500, "", true},
		}
		if level == zapcore.DebugLevel {
			want = append([]line{{zapcore.DebugLevel, "request", "/ok", 200, "", true}}, want...)
		}
		require.Equal(t, want, got, "at level %s", level)
	}
}
