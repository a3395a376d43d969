package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// Ironic microversion headers (Ironic API: api/controllers/base.py).
const (
	IronicVersionHeader    = "X-OpenStack-Ironic-API-Version"
	IronicMinVersionHeader = "X-OpenStack-Ironic-API-Minimum-Version"
	IronicMaxVersionHeader = "X-OpenStack-Ironic-API-Maximum-Version"
)

// Version is an API microversion, major.minor.
type Version struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// AtLeast reports whether v >= major.minor.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

// Less reports whether v < o.
func (v Version) Less(o Version) bool {
	return v.Major < o.Major || (v.Major == o.Major && v.Minor < o.Minor)
}

// Supported Ironic microversions: 1.1 (also what a request without the header
// gets, as in Ironic) up to 1.82, Ironic 21.4's maximum, which is what the
// `openstack baremetal` CLI (1.78) and openstacksdk negotiate against.
var (
	IronicMinVersion = Version{1, 1}
	IronicMaxVersion = Version{1, 82}
)

// ParseVersion parses "X.Y" (or "latest", meaning latest). ok is false for
// anything else.
func ParseVersion(s string, latest Version) (v Version, ok bool) {
	if strings.EqualFold(s, "latest") {
		return latest, true
	}
	maj, min, found := strings.Cut(s, ".")
	if !found {
		return v, false
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	if err1 != nil || err2 != nil || a < 0 || b < 0 {
		return v, false
	}
	return Version{a, b}, true
}

// IronicVersion negotiates X-OpenStack-Ironic-API-Version for /v1 requests
// as Ironic does: absent means the minimum (1.1), "latest" the maximum; the
// minimum/maximum headers are always set; a malformed value or a version out
// of range is 406 with Ironic's messages; the chosen version is echoed back.
func IronicVersion() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Response().Header()
			h.Set(IronicMinVersionHeader, IronicMinVersion.String())
			h.Set(IronicMaxVersionHeader, IronicMaxVersion.String())
			raw := c.Request().Header.Get(IronicVersionHeader)
			v := IronicMinVersion
			if raw != "" {
				var ok bool
				if v, ok = ParseVersion(raw, IronicMaxVersion); !ok {
					return Errorf(http.StatusNotAcceptable, "Invalid value for %s header", IronicVersionHeader)
				}
			}
			if v.Major != 1 {
				return Errorf(http.StatusNotAcceptable,
					"Mutually exclusive versions requested. Version %s requested but not supported by this service. The supported version range is: [%s, %s].",
					v, IronicMinVersion, IronicMaxVersion)
			}
			if v.Less(IronicMinVersion) || IronicMaxVersion.Less(v) {
				return Errorf(http.StatusNotAcceptable,
					"Version %s was requested but the minor version is not supported by this service. The supported version range is: [%s, %s].",
					v, IronicMinVersion, IronicMaxVersion)
			}
			h.Set(IronicVersionHeader, v.String())
			c.Set(versionKey, v)
			c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), versionCtxKey{}, v)))
			return next(c)
		}
	}
}

const versionKey = "metalloc.version"

type versionCtxKey struct{}

// RequestVersion returns the negotiated microversion of the request.
func RequestVersion(c echo.Context) Version {
	if v, ok := c.Get(versionKey).(Version); ok {
		return v
	}
	return IronicMinVersion
}

// ReadOnly answers a method other than GET on a read-only Ironic resource
// (conductors, shards): 405 with Allow: GET, in Ironic's error body.
func ReadOnly(c echo.Context) error {
	c.Response().Header().Set("Allow", http.MethodGet)
	return Errorf(http.StatusMethodNotAllowed, "The method is not allowed for the requested URL.")
}

// GateResource hides a resource below microversion 1.minor as Ironic's
// controllers do in their _route: 404 for GET, 405 for other methods, "The
// API version does not allow <what>".
func GateResource(minor int, what string) func(echo.HandlerFunc) echo.HandlerFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !RequestVersion(c).AtLeast(1, minor) {
				status := http.StatusMethodNotAllowed
				if c.Request().Method == http.MethodGet {
					status = http.StatusNotFound
				}
				return Errorf(status, "The API version does not allow %s", what)
			}
			return next(c)
		}
	}
}

// PublicURL is the base URL links are built from: the configured public
// endpoint, or scheme://host of the request.
func PublicURL(c echo.Context, configured string) string {
	if configured != "" {
		return strings.TrimRight(configured, "/")
	}
	return c.Scheme() + "://" + c.Request().Host
}

// Link is an Ironic/OpenStack link object.
type Link struct {
	Href string `json:"href"`
	Rel  string `json:"rel"`
	Type string `json:"type,omitempty"`
}

// ResourceLinks returns the self (…/v1/res/id) and bookmark (…/res/id) links
// Ironic attaches to every resource.
func ResourceLinks(base, resource, id string) []Link {
	return []Link{
		{Href: base + "/v1/" + resource + "/" + id, Rel: "self"},
		{Href: base + "/" + resource + "/" + id, Rel: "bookmark"},
	}
}

// IronicVersionDoc is the version object of Ironic's root documents.
func IronicVersionDoc(base string) map[string]any {
	return map[string]any{
		"id":          "v1",
		"links":       []Link{{Href: base + "/v1/", Rel: "self"}},
		"status":      "CURRENT",
		"min_version": IronicMinVersion.String(),
		"version":     IronicMaxVersion.String(),
	}
}

// RegisterIronicRoot serves GET / and GET /v1 (and /v1/) version documents in
// Ironic's shape, listing the given top-level resources in /v1.
func RegisterIronicRoot(e *echo.Echo, publicEndpoint string, resources []string) {
	e.GET("/", func(c echo.Context) error {
		base := PublicURL(c, publicEndpoint)
		return c.JSON(http.StatusOK, map[string]any{
			"name":            "OpenStack Ironic API",
			"description":     "metalloc: an Ironic-compatible bare-metal allocation service.",
			"default_version": IronicVersionDoc(base),
			"versions":        []any{IronicVersionDoc(base)},
		})
	})
	v1 := func(c echo.Context) error {
		base := PublicURL(c, publicEndpoint)
		doc := map[string]any{
			"id": "v1",
			"links": []Link{
				{Href: base + "/v1/", Rel: "self"},
				{Href: "https://docs.openstack.org/ironic/latest/contributor/webapi.html", Rel: "describedby", Type: "text/html"},
			},
			"media_types": map[string]string{
				"base": "application/json",
				"type": "application/vnd.openstack.ironic.v1+json",
			},
			"version": IronicVersionDoc(base),
		}
		for _, r := range resources {
			doc[r] = []Link{
				{Href: base + "/v1/" + r + "/", Rel: "self"},
				{Href: base + "/" + r + "/", Rel: "bookmark"},
			}
		}
		return c.JSON(http.StatusOK, doc)
	}
	e.GET("/v1", v1, IronicVersion())
	e.GET("/v1/", v1, IronicVersion())
}
