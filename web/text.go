package web

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// JSONText refuses, before any handler reads it, a JSON request body that is
// not text: bytes that are not UTF-8, or a \u escape of a UTF-16 surrogate
// that is not one half of a pair ("\ud800"), which encoding/json would
// silently store as U+FFFD. malformed renders the refusal in the API's own
// format from a problem such as "invalid UTF-8 at byte offset 12" (a 400:
// Ironic's "Invalid JSON in request body: ...", Placement's "Malformed
// JSON: ..."). A body whose Content-Type is not JSON, or missing, is left
// to the handler or middleware that refuses it (415); so is an empty body.
//
// Python's json module reads invalid UTF-8 as a malformed document (400 in
// Placement's extract_json) but accepts a lone surrogate escape, which then
// fails as it is encoded for the database (a 500); metalloc refuses both
// up front, so that every route, node PATCH included, stores text only.
//
// Cost: one utf8.Valid pass and one bytes.IndexByte scan for backslashes
// over a body BodyLimit has already read (read here otherwise); nothing is
// decoded.
func JSONText(malformed func(problem string) error) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if r.Body == nil || r.Body == http.NoBody || !jsonMediaType(r.Header.Get(echo.HeaderContentType)) {
				return next(c)
			}
			body, ok := r.Body.(*readBody)
			if !ok {
				raw, err := io.ReadAll(r.Body)
				if err != nil {
					return BadRequest("Could not read the request body: %v", err)
				}
				body = newReadBody(raw)
				r.Body = body
			}
			if problem := JSONTextProblem(body.raw); problem != "" {
				return malformed(problem)
			}
			return next(c)
		}
	}
}

// readBody is a request body already read in full (BodyLimit, JSONText):
// the bytes stay at hand for a later middleware, without another copy.
type readBody struct {
	*bytes.Reader
	raw []byte
}

func newReadBody(raw []byte) *readBody { return &readBody{Reader: bytes.NewReader(raw), raw: raw} }

// Close does nothing: the bytes are in memory.
func (*readBody) Close() error { return nil }

// jsonMediaType says whether a Content-Type names JSON: application/json,
// or any type that says json (application/json-patch+json). None is not:
// both APIs refuse a body without one (415, CrossSite's RequireJSON and
// Placement's require_content), which stays their answer.
func jsonMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return strings.Contains(mt, "json")
}

// JSONTextProblem says why body, a JSON document, is not text: "invalid
// UTF-8 at byte offset N", or "\uD800 at byte offset N is an unpaired
// surrogate, not a character" for a \u escape of a UTF-16 surrogate that is
// not a high one followed at once by a low one; "" when it is text (its
// JSON syntax is not checked: the decoder does that).
func JSONTextProblem(body []byte) string {
	if !utf8.Valid(body) {
		for i := 0; i < len(body); {
			r, n := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && n <= 1 {
				return fmt.Sprintf("invalid UTF-8 at byte offset %d", i)
			}
			i += n
		}
	}
	for i := 0; ; {
		j := bytes.IndexByte(body[i:], '\\')
		if j < 0 {
			return ""
		}
		i += j
		r, ok := hexEscape(body[i:])
		switch {
		case !ok:
			// Another escape (or a malformed one, the decoder's to refuse):
			// skip the backslash and the character it escapes.
			i += 2
		case !utf16.IsSurrogate(r):
			i += 6
		case r < 0xdc00:
			if low, ok := hexEscape(body[i+6:]); ok && low >= 0xdc00 && low <= 0xdfff {
				i += 12
				continue
			}
			fallthrough
		default:
			return fmt.Sprintf(`%s at byte offset %d is an unpaired surrogate, not a character`, body[i:i+6], i)
		}
		if i >= len(body) {
			return ""
		}
	}
}

// hexEscape reads a \uXXXX escape at the start of b.
func hexEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
