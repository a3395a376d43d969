package web

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/metalloc/metalloc/db"
)

// RequestIDHeader is the OpenStack request id header, set on every response.
const RequestIDHeader = "X-OpenStack-Request-Id"

type ctxKey int

const (
	loggerKey ctxKey = iota
	requestIDKey
)

// clientContextKey is where RequestID keeps the request's own context (the
// connection's: canceled when the client goes away), before any timeout
// middleware replaces it.
const clientContextKey = "web.client_context"

// StatusClientClosedRequest (499, nginx's "client closed request") is the
// status recorded, in metalloc_http_requests_total and the access log,
// for a request whose client went away before it was answered: not a
// server error, whatever the handler was doing.
const StatusClientClosedRequest = 499

// ClientGone reports whether the client of c's request has closed its
// connection (or the request was otherwise canceled from outside), as
// opposed to a deadline of the server's own passing. It needs RequestID
// to have run.
func ClientGone(c echo.Context) bool {
	ctx, ok := c.Get(clientContextKey).(context.Context)
	return ok && errors.Is(ctx.Err(), context.Canceled)
}

// answerClientGone records StatusClientClosedRequest for a request whose
// client left (nothing reaches the client any more) and logs err at Info:
// an impatient client is not a server error. It reports whether it did.
func answerClientGone(c echo.Context, err error) bool {
	if _, waiting := errors.AsType[bodyTimeout](err); waiting || c.Response().Committed || !ClientGone(c) {
		return false
	}
	Logger(c).Info("client closed the request before its answer", zap.Error(err))
	c.Response().WriteHeader(StatusClientClosedRequest)
	return true
}

// RequestID assigns each request an id "req-<uuid4>", sets it on the response,
// and stores a zap logger carrying it in the request context (see Logger),
// and the request's own context for ClientGone.
func RequestID(base *zap.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			id := "req-" + uuid.NewString()
			c.Response().Header().Set(RequestIDHeader, id)
			// Lazy: the field is encoded only if the request logs (a
			// successful GET, most of the traffic, logs at Debug).
			log := base.WithLazy(zap.String("request_id", id))
			ctx := context.WithValue(c.Request().Context(), loggerKey, log)
			ctx = context.WithValue(ctx, requestIDKey, id)
			c.SetRequest(c.Request().WithContext(ctx))
			c.Set(clientContextKey, ctx)
			return next(c)
		}
	}
}

// AccessLog logs one line per request: method, path, status, duration. 5xx
// at Error, 4xx at Info ("request rejected", with the reason the client
// was given: the error's message, see ErrorReason; 499, a client that left, as
// "request abandoned by the client"), successful GETs (the bulk of
// polling traffic) at Debug, other successes at Info. Each message is
// sampled separately by the logger (see config.NewLogger).
func AccessLog() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			status := c.Response().Status
			level, msg := zapcore.InfoLevel, "request"
			switch {
			case status == StatusClientClosedRequest:
				msg = "request abandoned by the client"
			case status == http.StatusServiceUnavailable:
				// The database is down: ClassifyError has logged why.
				level, msg = zapcore.WarnLevel, "request unavailable"
			case status >= 500:
				level, msg = zapcore.ErrorLevel, "request failed"
			case status >= 400:
				msg = "request rejected"
			case c.Request().Method == "GET":
				level = zapcore.DebugLevel
			}
			// The fields are built only for a line the logger writes.
			ce := Logger(c).Check(level, msg)
			if ce == nil {
				return nil
			}
			fields := []zap.Field{
				zap.String("method", c.Request().Method),
				zap.String("path", c.Request().URL.RequestURI()),
				zap.Int("status", status),
				zap.Duration("took", time.Since(start)),
			}
			if status >= 400 && status < 500 && status != StatusClientClosedRequest {
				if reason := ErrorReason(err); reason != "" {
					fields = append(fields, zap.String("reason", reason))
				}
			}
			ce.Write(fields...)
			return nil
		}
	}
}

// ErrorReason is the message a 4xx answer gives the client for err (a
// handler's or a middleware's error): *Error's message, *PlacementError's
// detail, an authentication refusal's message, an echo routing error's
// text, an invalid value PostgreSQL refused. It is "" for nil and for
// errors that become 5xx (ClassifyError logs those in full).
func ErrorReason(err error) string {
	if err == nil {
		return ""
	}
	var apiErr *Error
	var pe *PlacementError
	var ae placementAuthError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &apiErr):
		return apiErr.Message
	case errors.As(err, &pe):
		return pe.Detail
	case errors.As(err, &ae):
		return ae.message
	case errors.As(err, &he):
		return httpErrorMessage(he)
	}
	if msg, ok := db.DataException(err); ok {
		return "Invalid value in request: " + msg
	}
	return ""
}

// Logger returns the request-scoped logger (a no-op logger outside requests).
func Logger(c echo.Context) *zap.Logger { return LoggerFrom(c.Request().Context()) }

// LoggerFrom returns the logger stored by RequestID in ctx, or a no-op logger.
func LoggerFrom(ctx context.Context) *zap.Logger {
	if l, ok := ctx.Value(loggerKey).(*zap.Logger); ok {
		return l
	}
	return zap.NewNop()
}

// RequestIDFrom returns the request id stored in ctx, or "".
func RequestIDFrom(ctx context.Context) string {
	s, _ := ctx.Value(requestIDKey).(string)
	return s
}
