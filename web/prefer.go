package web

import (
	"net/http"
	"strconv"
	"strings"
)

// PreferWait reads the wait preference of RFC 7240 (section 4.3) from the
// request's Prefer headers: "Prefer: wait=10" asks the server to answer
// within 10 seconds. It returns the number of seconds and whether the
// preference was given with a valid value (a non-negative integer,
// optionally quoted). Other preferences, and a wait with an unreadable
// value, are ignored, as RFC 7240 asks; if wait appears more than once the
// first one counts.
func PreferWait(h http.Header) (seconds int, ok bool) {
	for _, line := range h.Values("Prefer") {
		for pref := range strings.SplitSeq(line, ",") {
			// token [= value] *( ";" parameter ): parameters don't matter here.
			pref, _, _ = strings.Cut(pref, ";")
			name, value, _ := strings.Cut(pref, "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			value = strings.Trim(strings.TrimSpace(value), `"`)
			n, err := strconv.Atoi(value)
			if err != nil || n < 0 {
				return 0, false
			}
			return n, true
		}
	}
	return 0, false
}

// AcceptsEventStream reports whether the request's Accept header names
// text/event-stream (Server-Sent Events), as EventSource clients send it.
func AcceptsEventStream(h http.Header) bool {
	for _, line := range h.Values("Accept") {
		for part := range strings.SplitSeq(line, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}
