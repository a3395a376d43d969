package web

import (
	"errors"
	"fmt"
	"html"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// Placement microversion negotiation (OpenStack Placement 8.0,
// placement/microversion.py behaviour): the request header
// "OpenStack-API-Version: placement 1.N" (or "latest"; other services'
// entries in the same header are ignored), default 1.0; every response
// carries the version served and Vary on the header.
const (
	PlacementVersionHeader = "OpenStack-API-Version"
	placementService       = "placement"
)

// Supported Placement microversions: 1.0 to 1.39 (Placement 8.0).
var (
	PlacementMinVersion = Version{1, 0}
	PlacementMaxVersion = Version{1, 39}
)

// Placement error codes (the "code" member of an error, microversion 1.23+),
// as Placement 8.0 names them.
const (
	PlacementCodeDefault              = "placement.undefined_code"
	PlacementCodeInventoryInUse       = "placement.inventory.inuse"
	PlacementCodeConcurrentUpdate     = "placement.concurrent_update"
	PlacementCodeDuplicateName        = "placement.duplicate_name"
	PlacementCodeProviderInUse        = "placement.resource_provider.inuse"
	PlacementCodeCannotDeleteParent   = "placement.resource_provider.cannot_delete_parent"
	PlacementCodeProviderNotFound     = "placement.resource_provider.not_found"
	PlacementCodeDuplicateQueryParam  = "placement.query.duplicate_key"
	PlacementCodeQueryParamBadValue   = "placement.query.bad_value"
	PlacementCodeQueryParamMissingVal = "placement.query.missing_value"
)

// PlacementError is an error answered in Placement's format:
// {"errors": [{"status", "title", "detail", "code" (1.23+), "request_id"}]}.
// Detail is the whole human-readable text; Code defaults to
// PlacementCodeDefault.
type PlacementError struct {
	Status int
	Code   string
	Detail string
	// Raised marks an error Placement raises past its microversion
	// middleware (an object's NotFound that the handler does not catch, a
	// policy refusal, an unknown route): the response then carries
	// OpenStack-API-Version but no Vary header.
	Raised bool
}

func (e *PlacementError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Detail) }

// PlacementErr returns a PlacementError with the given status, code ("" for
// the default code) and formatted detail.
func PlacementErr(status int, code, format string, args ...any) *PlacementError {
	return &PlacementError{Status: status, Code: code, Detail: fmt.Sprintf(format, args...)}
}

// PlacementRaised returns err marked Raised (see PlacementError) when it is
// a *PlacementError, and err unchanged otherwise.
func PlacementRaised(err error) error {
	var pe *PlacementError
	if errors.As(err, &pe) {
		cp := *pe
		cp.Raised = true
		return &cp
	}
	return err
}

// PlacementAuthFailure is a refusal of Placement's authentication
// middleware (401, or 400/503), which runs outside microversion
// negotiation: the response has neither OpenStack-API-Version nor Vary, and
// its body is the generic {"code", "message", "title"} document
// keystonemiddleware writes, not Placement's error list. challenge, when
// set, is sent as WWW-Authenticate.
func PlacementAuthFailure(status int, message, challenge string) error {
	return placementAuthError{status: status, message: message, challenge: challenge}
}

type placementAuthError struct {
	status             int
	message, challenge string
}

func (e placementAuthError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.message) }

// PlacementVersion is echo middleware that negotiates the Placement
// microversion. A malformed header gets 400 and a version outside
// PlacementMinVersion..PlacementMaxVersion gets 406 (with min_version and
// max_version in the error), as Placement answers; those two responses
// carry neither OpenStack-API-Version nor Vary, since negotiation failed.
func PlacementVersion() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Response().Header()
			v := PlacementMinVersion
			if raw, ok := placementHeaderValue(c.Request().Header.Values(PlacementVersionHeader)); ok {
				parsed, ok := ParseVersion(strings.TrimSpace(raw), PlacementMaxVersion)
				if !ok {
					return PlacementErr(http.StatusBadRequest, "", "invalid version string: %s", raw)
				}
				if parsed.Less(PlacementMinVersion) || PlacementMaxVersion.Less(parsed) {
					return &placementVersionError{PlacementErr(http.StatusNotAcceptable, "",
						"Unacceptable version header: %s", parsed)}
				}
				v = parsed
			}
			h.Set(PlacementVersionHeader, placementService+" "+v.String())
			h.Add("Vary", strings.ToLower(PlacementVersionHeader)) // as Placement spells it
			c.Set("placement.version", v)
			return next(c)
		}
	}
}

// placementVersionError marks a 406 from negotiation: its body also gives
// min_version and max_version.
type placementVersionError struct{ *PlacementError }

func (e *placementVersionError) Unwrap() error { return e.PlacementError }

// placementHeaderValue finds "placement X.Y" among the header's
// comma-separated "service version" entries.
func placementHeaderValue(values []string) (string, bool) {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			fields := strings.Fields(part)
			if len(fields) == 2 && strings.EqualFold(fields[0], placementService) {
				return fields[1], true
			}
		}
	}
	return "", false
}

// PlacementRequestVersion is the microversion PlacementVersion negotiated
// for the request (1.0 outside it).
func PlacementRequestVersion(c echo.Context) Version {
	if v, ok := c.Get("placement.version").(Version); ok {
		return v
	}
	return PlacementMinVersion
}

// PlacementErrorHandler is an echo.HTTPErrorHandler writing Placement's error
// body. *PlacementError keeps its status, code and detail; echo errors (404
// route not found, 405) and database errors are classified as ClassifyError
// does (503 while the database is unavailable, 500 without internals); a
// request whose client left gets StatusClientClosedRequest and no body.
func PlacementErrorHandler(err error, c echo.Context) {
	if c.Response().Committed || answerClientGone(c, err) {
		return
	}
	var pe *PlacementError
	var he *echo.HTTPError
	var ae placementAuthError
	switch {
	case errors.As(err, &ae):
		h := c.Response().Header()
		h.Del(PlacementVersionHeader)
		h.Del("Vary")
		if ae.challenge != "" {
			h.Set("WWW-Authenticate", ae.challenge)
		}
		msg := ae.message
		if ae.status == http.StatusUnauthorized {
			msg = "The request you have made requires authentication."
		}
		_ = c.JSON(ae.status, map[string]any{
			"code":    fmt.Sprintf("%d %s", ae.status, http.StatusText(ae.status)),
			"title":   http.StatusText(ae.status),
			"message": msg,
		})
		return
	case errors.As(err, &pe):
	case errors.As(err, &he):
		pe = &PlacementError{Status: he.Code, Detail: fmt.Sprint(he.Message)}
		switch he.Code {
		case http.StatusNotFound:
			pe.Detail = "The resource could not be found."
			pe.Raised = true
		case http.StatusMethodNotAllowed:
			pe.Detail = fmt.Sprintf("The method %s is not allowed for this resource.", c.Request().Method)
			setPlacementAllow(c)
		}
	default:
		status, msg := ClassifyError(err, Logger(c))
		pe = &PlacementError{Status: status, Detail: msg}
	}
	if pe.Raised {
		c.Response().Header().Del("Vary")
	}
	setRetryAfter(c, pe.Status)
	// webob renders Placement's errors through strip_tags, which turns
	// every line break into a space: a detail is one line (clients such as
	// osc-placement show only its last line).
	detail := placementOneLine(pe.Detail)
	body := map[string]any{
		"status": pe.Status,
		"title":  http.StatusText(pe.Status),
		"detail": detail,
	}
	if id := RequestIDFrom(c.Request().Context()); id != "" {
		body["request_id"] = id
	}
	if PlacementRequestVersion(c).AtLeast(1, 23) {
		code := pe.Code
		if code == "" {
			code = PlacementCodeDefault
		}
		body["code"] = code
	}
	var ve *placementVersionError
	if errors.As(err, &ve) {
		body["min_version"] = PlacementMinVersion.String()
		body["max_version"] = PlacementMaxVersion.String()
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(pe.Status)
		return
	}
	status := fmt.Sprintf("%d %s", pe.Status, http.StatusText(pe.Status))
	switch ErrorMediaType(c.Request().Header.Get("Accept")) {
	case echo.MIMETextHTML:
		_ = c.HTML(pe.Status, "<html>\n <head>\n  <title>"+status+"</title>\n </head>\n <body>\n  <h1>"+status+
			"</h1>\n  "+html.EscapeString(pe.Detail)+"\n </body>\n</html>")
	case echo.MIMETextPlain:
		_ = c.String(pe.Status, status+"\n\n"+detail)
	default:
		_ = c.JSON(pe.Status, map[string]any{"errors": []any{body}})
	}
}

// placementOneLine is s with its line breaks as webob's strip_tags leaves
// them: "\n" a space, "\r" dropped.
func placementOneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r", ""), "\n", " ")
}

// ErrorMediaType picks the media type of an error body from the request's
// Accept header as Placement (webob) does: JSON when the header is absent
// or "*/*"; otherwise the preferred of text/html and application/json by
// q-value (text/html on a tie), and text/plain when neither is acceptable.
// An unparsable header gets JSON.
func ErrorMediaType(accept string) string {
	accept = strings.TrimSpace(accept)
	if accept == "" || accept == "*/*" {
		return echo.MIMEApplicationJSON
	}
	best, bestQ := echo.MIMETextPlain, 0.0
	for _, offer := range []string{echo.MIMETextHTML, echo.MIMEApplicationJSON} {
		q, ok := acceptQ(accept, offer)
		if !ok {
			return echo.MIMEApplicationJSON
		}
		if q > bestQ {
			best, bestQ = offer, q
		}
	}
	return best
}

// acceptQ is the q-value the Accept header gives offer (type/subtype): that
// of its most specific matching range, 0 when none matches; ok is false for
// a header that does not parse.
func acceptQ(accept, offer string) (q float64, ok bool) {
	otyp, osub, _ := strings.Cut(offer, "/")
	specificity := -1
	for _, part := range strings.Split(accept, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		mt, params, err := mime.ParseMediaType(part)
		if err != nil {
			return 0, false
		}
		rq := 1.0
		if s, has := params["q"]; has {
			if rq, err = strconv.ParseFloat(s, 64); err != nil {
				return 0, false
			}
		}
		typ, sub, _ := strings.Cut(strings.ToLower(mt), "/")
		spec := -1
		switch {
		case typ == otyp && sub == osub:
			spec = 2
		case typ == otyp && sub == "*":
			spec = 1
		case typ == "*" && sub == "*":
			spec = 0
		}
		if spec > specificity {
			specificity, q = spec, rq
		}
	}
	return q, true
}

// PlacementVersionDoc is the version document Placement serves at "/".
func PlacementVersionDoc() map[string]any {
	return map[string]any{"versions": []any{map[string]any{
		"id":          "v" + PlacementMinVersion.String(),
		"min_version": PlacementMinVersion.String(),
		"max_version": PlacementMaxVersion.String(),
		"status":      "CURRENT",
		"links":       []any{map[string]string{"rel": "self", "href": ""}},
	}}}
}

// AcceptsJSON reports whether the Accept header value admits
// application/json (at a q-value above 0; a header that does not parse
// admits everything).
func AcceptsJSON(accept string) bool {
	q, ok := acceptQ(accept, echo.MIMEApplicationJSON)
	return !ok || q > 0
}

// setPlacementAllow sets the Allow header of a 405 to the methods the
// route has, without the OPTIONS echo adds (Placement serves no OPTIONS).
func setPlacementAllow(c echo.Context) {
	allow, _ := c.Get(echo.ContextKeyHeaderAllow).(string)
	if allow == "" {
		allow = c.Response().Header().Get(echo.HeaderAllow)
	}
	var methods []string
	for _, m := range strings.Split(allow, ",") {
		if m = strings.TrimSpace(m); m != "" && m != http.MethodOptions {
			methods = append(methods, m)
		}
	}
	if len(methods) > 0 {
		c.Response().Header().Set(echo.HeaderAllow, strings.Join(methods, ", "))
	}
}

// PlacementNoOptions is echo middleware answering 405 to OPTIONS on a known
// route (echo would answer 204 with Allow itself); Placement has no OPTIONS
// handlers.
func PlacementNoOptions() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Request().Method == http.MethodOptions {
				if _, ok := c.Get(echo.ContextKeyHeaderAllow).(string); ok {
					return echo.ErrMethodNotAllowed
				}
			}
			return next(c)
		}
	}
}
