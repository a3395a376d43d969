package web

import (
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"
)

// CrossSiteOptions configures CrossSite.
type CrossSiteOptions struct {
	// RequireJSON refuses a state-changing request with a body unless its
	// Content-Type is application/json or application/<something>+json
	// (metalloc-api; metalloc-placement's handlers check their own, with
	// Placement's messages).
	RequireJSON bool
	// PublicEndpoint, when set, is an origin allowed besides the request's
	// own host (the API's configured public URL).
	PublicEndpoint string
	// Forbidden renders the 403 of a cross-site request, Unsupported the
	// 415 of a body that is not JSON (mediaType: what was sent, "None"
	// when nothing), in the API's error format.
	Forbidden   func(msg string) error
	Unsupported func(mediaType string) error
}

// CrossSiteMessage is the 403 answer to a state-changing request a browser
// sent from a page of another site.
const CrossSiteMessage = "Cross-site request refused: a page of another site may not change anything here."

// CrossSite is echo middleware that keeps browsers on other sites from
// changing anything through the API with the user's credentials (cross-site
// request forgery; http_basic credentials a browser remembers, or a
// loopback API without authentication, would otherwise do). It looks only
// at state-changing methods (POST, PUT, PATCH, DELETE) and refuses:
//
//   - with 403, a request the browser marks as coming from another site:
//     Sec-Fetch-Site other than same-origin or none (modern browsers send
//     it on every request), or, without it, an Origin that is not the
//     request's own host (nor PublicEndpoint's);
//   - with RequireJSON, with 415, a request with a body whose media type
//     is not JSON: an HTML form (text/plain, urlencoded, multipart) or a
//     script without a CORS preflight can send nothing else, and every
//     OpenStack client sends application/json.
//
// Requests without these headers, as every API client sends them, pass.
func CrossSite(opts CrossSiteOptions) echo.MiddlewareFunc {
	var public string
	if u, err := url.Parse(opts.PublicEndpoint); err == nil && u.Host != "" {
		public = strings.ToLower(u.Host)
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			switch r.Method {
			case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			default:
				return next(c)
			}
			if crossSite(r, public) {
				return opts.Forbidden(CrossSiteMessage)
			}
			if opts.RequireJSON && (r.ContentLength > 0 || r.ContentLength < 0) {
				ct := r.Header.Get("Content-Type")
				mt, _, err := mime.ParseMediaType(ct)
				if err != nil || !isJSONMediaType(mt) {
					switch {
					case ct == "":
						ct = "None"
					case err == nil:
						ct = mt
					}
					return opts.Unsupported(ct)
				}
			}
			return next(c)
		}
	}
}

// isJSONMediaType: application/json, or a structured +json type such as
// application/json-patch+json.
func isJSONMediaType(mt string) bool {
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// crossSite reports whether a browser says r comes from a page of another
// site (public: an allowed host besides r.Host).
func crossSite(r *http.Request, public string) bool {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "same-origin", "none":
		return false
	case "":
	default: // cross-site, same-site (another origin of the site), or unknown
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return true // "null" (sandboxed frames, file:, data:) or garbage
	}
	host := hostWithDefaultPort(u.Host, u.Scheme)
	if public != "" && host == hostWithDefaultPort(public, u.Scheme) {
		return false
	}
	return host != hostWithDefaultPort(r.Host, u.Scheme)
}

// hostWithDefaultPort lower-cases host[:port] and drops the scheme's
// default port, so that https://api.example and Host api.example:443
// compare equal.
func hostWithDefaultPort(host, scheme string) string {
	host = strings.ToLower(host)
	switch {
	case scheme == "https" && strings.HasSuffix(host, ":443"):
		return strings.TrimSuffix(host, ":443")
	case scheme == "http" && strings.HasSuffix(host, ":80"):
		return strings.TrimSuffix(host, ":80")
	}
	return host
}
