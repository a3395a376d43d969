package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

// TestJSONTextProblem: raw bytes that are not UTF-8 and \u escapes of lone
// surrogates (which encoding/json turns into U+FFFD) are found, with their
// byte offset; surrogate pairs, escaped backslashes and other escapes are
// text.
func TestJSONTextProblem(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ body, want string }{
		{`{"extra": {"a": "é ☃ 😀"}}`, ""},
		{`{"a": "\ud83d\ude00"}`, ""},              // a pair: 😀
		{`{"a": "\uD83D\uDE00 \u00e9 \n \\"}`, ""}, // upper-case hex, other escapes
		{`{"a": "\\ud800"}`, ""},                   // a backslash, then the text ud800
		{`{"a": "\u12"}`, ""},                      // malformed: the decoder's to refuse
		{`\`, ""},
		{"{\"a\": \"\xff\"}", "invalid UTF-8 at byte offset 7"},
		{"{\"a\": \"\xed\xa0\x80\"}", "invalid UTF-8 at byte offset 7"}, // a surrogate encoded in UTF-8
		{"{\"a\": \"\xc3\"}", "invalid UTF-8 at byte offset 7"},         // truncated
		{`{"a": "\ud800"}`, `\ud800 at byte offset 7 is an unpaired surrogate, not a character`},
		{`{"a": "\udc00\ud800"}`, `\udc00 at byte offset 7 is an unpaired surrogate, not a character`},
		{`{"a": "\ud800\u0041"}`, `\ud800 at byte offset 7 is an unpaired surrogate, not a character`},
		{`{"a": "x\\\uDFFF"}`, `\uDFFF at byte offset 10 is an unpaired surrogate, not a character`},
		{`{"k\ud800": 1}`, `\ud800 at byte offset 3 is an unpaired surrogate, not a character`},
		{`"\ud83d`, `\ud83d at byte offset 1 is an unpaired surrogate, not a character`},
	} {
		require.Equal(t, c.want, JSONTextProblem([]byte(c.body)), "%q", c.body)
		if c.want == "" {
			continue
		}
		// What the check prevents: encoding/json reads it as U+FFFD.
		var v any
		if json.Unmarshal([]byte(c.body), &v) == nil {
			raw, _ := json.Marshal(v)
			require.Contains(t, string(raw), "\ufffd", "%q", c.body)
		}
	}
}

// TestJSONText: behind BodyLimit or alone, a JSON body that is not text is
// refused in the API's format before the handler runs; text passes whole,
// and a body of another media type, or none, is left to the handler.
func TestJSONText(t *testing.T) {
	t.Parallel()
	for _, limit := range []int64{0, 1000} {
		e := echo.New()
		e.HTTPErrorHandler = IronicErrorHandler
		called := 0
		e.Use(BodyLimit(limit, func() error { return Errorf(http.StatusRequestEntityTooLarge, "Request is too large.") }),
			JSONText(func(p string) error { return BadRequest("Invalid JSON in request body: %s", p) }))
		e.Any("/", func(c echo.Context) error {
			called++
			b, _ := io.ReadAll(c.Request().Body)
			return c.String(http.StatusOK, string(b))
		})
		send := func(method, ct, body string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(method, "/", strings.NewReader(body))
			if ct != "" {
				r.Header.Set(echo.HeaderContentType, ct)
			}
			w := httptest.NewRecorder()
			e.ServeHTTP(w, r)
			return w
		}
		for _, ct := range []string{"application/json", "application/json; charset=UTF-8", "application/json-patch+json"} {
			for _, method := range []string{http.MethodPost, http.MethodPatch, http.MethodPut} {
				w := send(method, ct, "{\"extra\": {\"a\": \"\xff\"}}")
				require.Equal(t, http.StatusBadRequest, w.Code, "%s %s", method, ct)
				require.Equal(t, "Invalid JSON in request body: invalid UTF-8 at byte offset 17",
					IronicFaultString(w.Body.Bytes()))
				w = send(method, ct, `[{"op": "add", "path": "/extra/a", "value": "\ud800"}]`)
				require.Equal(t, http.StatusBadRequest, w.Code, "%s %s", method, ct)
				require.Equal(t, `Invalid JSON in request body: \ud800 at byte offset 45 is an unpaired surrogate, not a character`,
					IronicFaultString(w.Body.Bytes()))
			}
		}
		require.Zero(t, called, "refused before the handler")
		w := send(http.MethodPost, "application/json", `{"a": "é \ud83d\ude00"}`)
		require.Equal(t, http.StatusOK, w.Code)
		require.Equal(t, `{"a": "é \ud83d\ude00"}`, w.Body.String())
		w = send(http.MethodPost, "text/plain", "\xff")
		require.Equal(t, http.StatusOK, w.Code, "another media type is the handler's")
		w = send(http.MethodPost, "", "\xff")
		require.Equal(t, http.StatusOK, w.Code, "no media type is the handler's")
		w = send(http.MethodGet, "", "")
		require.Equal(t, http.StatusOK, w.Code)
		require.Equal(t, 4, called)
	}
}
