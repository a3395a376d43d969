package ironic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/metalloc/metalloc/web"
)

// Error is a request to Ironic that failed: Ironic answered Status with
// Message (the faultstring of its error body), or, with Status 0, Ironic
// could not be reached (Message says why: refused, timed out, TLS).
type Error struct {
	Method, URL string
	Status      int
	Message     string
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("ironic %s %s: unreachable: %s", e.Method, e.URL, e.Message)
	}
	return fmt.Sprintf("ironic %s %s: %d: %s", e.Method, e.URL, e.Status, e.Message)
}

// ErrLeaseLost is returned by the full sync when another conductor holds
// the sync lease (this one was taken for dead, or released it): it
// stopped writing at once.
var ErrLeaseLost = errors.New("ironic: the node sync lease is held by another conductor")

// StatusOf is the HTTP status Ironic answered for err (0: unreachable, or
// not an Ironic error).
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsNotFound reports whether Ironic answered 404.
func IsNotFound(err error) bool { return StatusOf(err) == http.StatusNotFound }

// IsConflict reports whether Ironic answered 409 (a node locked, in use,
// or a name or uuid taken).
func IsConflict(err error) bool { return StatusOf(err) == http.StatusConflict }

// IsUnavailable reports whether Ironic could not be reached or answered
// that it is (502, 503, 504): worth retrying later, not the request's
// fault.
func IsUnavailable(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Status {
	case 0, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// faultString is the message of an Ironic error body: the faultstring of
// {"error_message": "{\"faultstring\": ...}"}, or the description of the
// {"error_message": "{\"code\": 406, \"title\": ..., \"description\": ...}"}
// form its version negotiation answers with, else the body itself.
func faultString(body []byte) string {
	var outer struct {
		ErrorMessage string `json:"error_message"`
	}
	var inner struct {
		Description string `json:"description"`
	}
	if json.Unmarshal(body, &outer) == nil &&
		json.Unmarshal([]byte(outer.ErrorMessage), &inner) == nil && inner.Description != "" {
		return inner.Description
	}
	return web.IronicFaultString(body)
}

// mapError turns what gophercloud or net/http returned for method url
// into an *Error (nil stays nil; ctx's own end stays ctx.Err(), so a
// caller's cancellation is not mistaken for an outage).
func mapError(ctx context.Context, method, url string, err error) error {
	if err == nil {
		return nil
	}
	var ue gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &ue) {
		return &Error{Method: method, URL: url, Status: ue.Actual, Message: faultString(ue.Body)}
	}
	var ie *Error
	if errors.As(err, &ie) {
		return ie
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	msg := err.Error()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		msg = "timed out"
	} else if i := strings.LastIndex(msg, ": "); i >= 0 && errors.As(err, new(*net.OpError)) {
		msg = msg[i+2:]
	}
	return &Error{Method: method, URL: url, Message: msg}
}
