package web

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// DefaultMaxLimit is Ironic's [api]max_limit: the page size when no limit is
// given, and the cap on any requested limit.
const DefaultMaxLimit = 1000

// ListParams are the paging and projection parameters shared by Ironic list
// endpoints.
type ListParams struct {
	// Limit is the page size, 1..max limit.
	Limit int
	// Marker is the uuid of the last item of the previous page ("" = start).
	Marker string
	// SortKey is the field to sort by (default "id", i.e. creation order).
	SortKey string
	// SortDesc is true for sort_dir=desc.
	SortDesc bool
	// Fields is the requested projection (nil = all fields).
	Fields []string
}

// ParseListParams reads limit, marker, sort_key, sort_dir and fields with
// Ironic's rules: limit must be a positive integer ("Limit must be positive")
// and is capped at maxLimit; sort_dir is asc or desc.
func ParseListParams(c echo.Context, maxLimit int) (ListParams, error) {
	p := ListParams{Limit: maxLimit, SortKey: "id"}
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return p, BadRequest("Invalid input for field/attribute limit. Value: '%s'. Wrong type. Expected 'int', got 'str'", s)
		}
		if n <= 0 {
			return p, BadRequest("Limit must be positive")
		}
		p.Limit = min(n, maxLimit)
	}
	p.Marker = c.QueryParam("marker")
	if s := c.QueryParam("sort_key"); s != "" {
		p.SortKey = s
	}
	switch d := c.QueryParam("sort_dir"); d {
	case "", "asc":
	case "desc":
		p.SortDesc = true
	default:
		return p, BadRequest("Invalid sort direction: %s. Acceptable values are 'asc' or 'desc'", d)
	}
	fields, err := ParseFields(c)
	if err != nil {
		return p, err
	}
	p.Fields = fields
	return p, nil
}

// ParseFields reads the comma-separated `fields` query parameter (nil when
// absent). Projection needs microversion 1.8, as in Ironic.
func ParseFields(c echo.Context) ([]string, error) {
	s := c.QueryParam("fields")
	if s == "" {
		return nil, nil
	}
	if !RequestVersion(c).AtLeast(1, 8) {
		return nil, Errorf(406, "Request not acceptable.")
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.ToLower(strings.TrimSpace(f)); f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// CheckFields returns Ironic's 400 when fields names anything not in valid.
func CheckFields(fields []string, valid map[string]bool) error {
	var bad []string
	for _, f := range fields {
		if !valid[f] {
			bad = append(bad, f)
		}
	}
	if len(bad) > 0 {
		return BadRequest(`Field(s) "%s" are not valid`, strings.Join(bad, ", "))
	}
	return nil
}

// NextLink returns the `next` URL of a page that came back full (n == limit),
// or "" when it did not. It keeps the query arguments in keep (e.g. filters
// and fields) and appends limit and marker, as Ironic's collection links do.
func NextLink(base, resource string, n, limit int, lastUUID string, keep url.Values) string {
	if n == 0 || n != limit {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s/v1/%s?", base, resource)
	for k, vs := range keep {
		for _, v := range vs {
			b.WriteString(url.QueryEscape(k) + "=" + url.QueryEscape(v) + "&")
		}
	}
	fmt.Fprintf(&b, "limit=%d&marker=%s", limit, lastUUID)
	return b.String()
}

// Project keeps only the named keys of doc, plus "links" as Ironic does (all
// of them when fields is nil).
func Project(doc map[string]any, fields []string) map[string]any {
	if fields == nil {
		return doc
	}
	out := make(map[string]any, len(fields)+1)
	if l, ok := doc["links"]; ok {
		out["links"] = l
	}
	for _, f := range fields {
		if v, ok := doc[f]; ok {
			out[f] = v
		}
	}
	return out
}
