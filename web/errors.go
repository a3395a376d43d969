package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/db"
)

// Error is a client-visible API failure: an HTTP status and a message a person
// can act on. Handlers return it (possibly wrapped); the error handler renders
// it in the API's own error format.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// Errorf builds an *Error with a formatted message.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Message: fmt.Sprintf(format, args...)}
}

// BadRequest, NotFound, Conflict and NotAcceptable are shorthands for Errorf.
func BadRequest(format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, format, args...)
}

// NotFound is Errorf with 404.
func NotFound(format string, args ...any) *Error { return Errorf(http.StatusNotFound, format, args...) }

// Conflict is Errorf with 409.
func Conflict(format string, args ...any) *Error { return Errorf(http.StatusConflict, format, args...) }

// ironicFault is the JSON document Ironic serialises into error_message.
type ironicFault struct {
	Faultstring string  `json:"faultstring"`
	Faultcode   string  `json:"faultcode"`
	Debuginfo   *string `json:"debuginfo"`
}

// IronicErrorBody renders msg as Ironic does: {"error_message": "<JSON string of
// {faultstring, faultcode, debuginfo}>"}, faultcode "Client" for 4xx and
// "Server" for 5xx.
func IronicErrorBody(status int, msg string) map[string]string {
	code := "Client"
	if status >= 500 {
		code = "Server"
	}
	inner, _ := json.Marshal(ironicFault{Faultstring: msg, Faultcode: code})
	return map[string]string{"error_message": string(inner)}
}

// IronicFaultString is the faultstring of an Ironic error body (the
// inverse of IronicErrorBody), or the body itself, trimmed, when it is not
// one: what a client shows.
func IronicFaultString(body []byte) string {
	var outer struct {
		ErrorMessage string `json:"error_message"`
	}
	var inner ironicFault
	if json.Unmarshal(body, &outer) == nil && json.Unmarshal([]byte(outer.ErrorMessage), &inner) == nil && inner.Faultstring != "" {
		return inner.Faultstring
	}
	return strings.TrimSpace(string(body))
}

// ClassifyError turns any handler error into a status and a message safe to
// show: *Error as is, echo's routing errors with their status, a lock or
// serialization conflict left after retries as 409, an unreachable database
// as 503, everything else as 500 without internals (logged in full).
func ClassifyError(err error, log *zap.Logger) (int, string) {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr.Status, apiErr.Message
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he.Code, httpErrorMessage(he)
	}
	if code := db.DataExceptionCode(err); code != "" {
		// Values PostgreSQL cannot store (a NUL byte, invalid UTF-8, a
		// number out of range) are the client's mistake, not ours; the
		// client is told in the API's words, never PostgreSQL's.
		msg, _ := db.DataException(err)
		log.Info("value refused by the database", zap.String("sqlstate", code), zap.String("reason", msg))
		return http.StatusBadRequest, "Invalid value in request: " + dataProblem(code)
	}
	if db.IsTransient(err) {
		// A lock or serialization conflict that outlasted db.InTx's
		// retries: the client may retry, as after Ironic's NodeLocked (409).
		log.Warn("concurrency conflict after retries", zap.Error(err))
		return http.StatusConflict, "The resource is busy with a concurrent request; retry after it completes."
	}
	if db.IsUnavailable(err) {
		log.Warn("database unavailable", zap.Error(err))
		return http.StatusServiceUnavailable, "The database is temporarily unavailable; retry later."
	}
	log.Error("internal error", zap.Error(err))
	return http.StatusInternalServerError, "Internal server error; see the service log for the request id."
}

// UnavailableRetryAfter is the Retry-After, in seconds, of a 503 the
// error handlers (IronicErrorHandler, PlacementErrorHandler) render
// without one of its own: chiefly "The database is temporarily
// unavailable", answered while PostgreSQL restarts or fails over (a
// Patroni failover takes its ttl, 10 to 30 s; docs/operations.md,
// "PostgreSQL high availability"). RFC 9110 lets a 503 say when to come
// back; Ironic and Placement send no Retry-After, and their clients retry
// a 503 on their own schedule (python-ironicclient every 2 s), so 2 s
// changes nothing for them and tells a plain HTTP client not to spin. The
// body keeps each API's error format.
//
// The other 503s of metalloc's daemons send it too: /readyz (Health: the
// database unreachable or failing over, a schema outside the binary's
// window, a stop under way; 2 s is the probe interval operations.md
// recommends, and what `curl --retry` waits, as it honours Retry-After)
// and metalloc-api in front of Ironic when Ironic does not answer
// (ironic.Front: a restart of Ironic's API; the conductors probe it every
// second, and ironicclient's own retries come every 2 s). A small value:
// each of those usually clears within seconds, and a client asking again
// too early gets another 503, cheaply.
const UnavailableRetryAfter = 2

// setRetryAfter adds Retry-After: UnavailableRetryAfter to a 503 answer
// that has none (an authentication refusal may carry its own).
func setRetryAfter(c echo.Context, status int) {
	h := c.Response().Header()
	if status == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
		h.Set("Retry-After", strconv.Itoa(UnavailableRetryAfter))
	}
}

// httpErrorMessage is the message shown for echo's own errors (no route,
// method not allowed, its middlewares' refusals).
func httpErrorMessage(he *echo.HTTPError) string {
	switch he.Code {
	case http.StatusNotFound:
		return "The resource could not be found."
	case http.StatusMethodNotAllowed:
		return "The method is not allowed for the requested URL."
	}
	if s, ok := he.Message.(string); ok && s != "" {
		return s
	}
	return http.StatusText(he.Code)
}

// dataProblem says what is wrong with a value PostgreSQL refused with the
// data exception code (SQLSTATE class 22), in words that hold whatever the
// request was.
func dataProblem(code string) string {
	switch code {
	case "22021": // character_not_in_repertoire
		return "text must not contain NUL characters (\\u0000) or invalid UTF-8."
	case "22P05": // untranslatable_character
		return "JSON text must not contain NUL characters (\\u0000)."
	case "22003": // numeric_value_out_of_range
		return "a number is out of range."
	case "22001": // string_data_right_truncation
		return "a value is too long."
	case "22007", "22008": // invalid_datetime_format, datetime_field_overflow
		return "a date or time is invalid or out of range."
	case "22P02": // invalid_text_representation
		return "a value does not have the expected format."
	}
	return "a value cannot be stored."
}

// IronicErrorHandler is an echo.HTTPErrorHandler writing Ironic's error
// body; a request whose client left gets StatusClientClosedRequest and no
// body.
func IronicErrorHandler(err error, c echo.Context) {
	if c.Response().Committed || answerClientGone(c, err) {
		return
	}
	status, msg := ClassifyError(err, Logger(c))
	setRetryAfter(c, status)
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, IronicErrorBody(status, msg))
}

// IronicPublicRoute reports whether the request is for a route Ironic
// serves without authentication: the version documents (/, /v1) and
// /metrics (counters only, no secrets; see docs/operations.md).
func IronicPublicRoute(c echo.Context) bool {
	switch strings.TrimRight(c.Request().URL.Path, "/") {
	case "", "/v1", "/metrics":
		return true
	}
	return false
}

// IronicAuthFailure renders an authentication refusal in Ironic's error
// body, with its WWW-Authenticate challenge.
func IronicAuthFailure(c echo.Context, f *auth.Failure) error {
	if f.Challenge != "" {
		c.Response().Header().Set("WWW-Authenticate", f.Challenge)
	}
	return Errorf(f.Status, "%s", f.Message)
}
