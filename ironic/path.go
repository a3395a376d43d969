package ironic

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// IronicPath is path as Ironic 21.4 resolves it, for deciding which of
// metalloc and Ironic a request reaches: path is the request's decoded
// path (url.URL.Path: Ironic's WSGI server decodes percent-escapes,
// %2F included, before routing). Trailing slashes and then a ".json"
// suffix are stripped (Ironic's JsonExtensionMiddleware, kept for
// clients of the guess_content_type_from_ext days), empty segments are
// dropped (pecan's routing skips them: //v1//allocations is
// /v1/allocations), and "." and ".." segments are resolved, as a client
// or proxy on the way may do. The result is "/" or "/seg/seg...".
func IronicPath(path string) string {
	p := strings.TrimRight(path, "/")
	p = strings.TrimSuffix(p, ".json")
	var segs []string
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
	}
	return "/" + strings.Join(segs, "/")
}

// OwnedSpelling reports whether a request for the URL path path (decoded)
// and rawPath (url.URL.RawPath: set when the client's percent-encoding
// differs from the default one) reaches metalloc's own routes, and, when
// it does, whether it is spelt canonically. A request is metalloc's when
// its path, or the path Ironic would resolve it to (IronicPath), is Owned
// in any letter case; it is canonical when it is spelt exactly as
// IronicPath gives it (no repeated slashes, no ".json", no dot segments,
// no needless percent-encoding, lower case where Owned is). An owned
// request that is not canonical is refused (CanonicalPaths): metalloc's
// router and Ironic's must never disagree on who answers it, so it is
// never forwarded. Trailing slashes are removed before this
// (metalloc-api's RemoveTrailingSlash, as Ironic ignores them).
func OwnedSpelling(path, rawPath string) (owned, canonical bool) {
	canon := IronicPath(path)
	if !Owned(path) && !Owned(strings.ToLower(path)) && !Owned(strings.ToLower(canon)) {
		return false, true
	}
	return true, rawPath == "" && strings.TrimRight(path, "/") == strings.TrimRight(canon, "/") && Owned(path)
}

// CanonicalPaths refuses, with 404 in Ironic's error format, a request
// that reaches a route metalloc owns in front of Ironic under another
// spelling (OwnedSpelling): //v1/allocations, /v1/allocations.json,
// /v1/./allocations, /v1/%61llocations, /V1/Allocations. Ironic would
// resolve them to metalloc's routes, metalloc's router would not, so
// without this they would go to Ironic (its allocator, its
// authentication), out of metalloc's sight. Put it before
// authentication and Front.Middleware.
func CanonicalPaths() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			u := c.Request().URL
			if owned, canonical := OwnedSpelling(u.Path, u.RawPath); owned && !canonical {
				return web.Errorf(http.StatusNotFound, "The resource could not be found. metalloc serves it only at "+
					"its canonical path: no repeated slashes, no .json suffix, no dot segments, no needless "+
					"percent-encoding, lower case.")
			}
			return next(c)
		}
	}
}
