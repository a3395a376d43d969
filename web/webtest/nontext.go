package webtest

import (
	"net/http"
	"strings"
	"testing"
)

// NonText are JSON string contents that are not text, each with the start
// of the problem web.JSONTextProblem names: raw bytes that are not UTF-8
// (one a surrogate encoded in UTF-8) and \u escapes of lone surrogates,
// which Go's decoder would read as U+FFFD.
var NonText = []struct{ Text, Problem string }{
	{"a\xffb", "invalid UTF-8 at byte offset"},
	{"\xed\xa0\x80", "invalid UTF-8 at byte offset"},
	{`a\ud800b`, `\ud800 at byte offset`},
	{`\udfff`, `\udfff at byte offset`},
}

// SendNonText sends each route (method, path under base, body with an X
// where the bad text goes) with each NonText in place of its X, with the
// header name/value pairs, requires a 400, and hands its body and the
// expected problem to check.
func SendNonText(t *testing.T, base string, routes [][3]string, check func(raw []byte, problem string), header ...string) {
	t.Helper()
	for _, r := range routes {
		for _, b := range NonText {
			body := strings.Replace(r[2], "X", b.Text, 1)
			st, _, raw := Do(t, r[0], base+r[1], body, header...)
			if st != http.StatusBadRequest {
				t.Fatalf("%s %s %q: %d %s, want 400", r[0], r[1], body, st, raw)
			}
			check(raw, b.Problem)
		}
	}
}
