package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
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

// InOrder is a collection of metalloc's own that is listed in creation
// order only (allocation groups, leases), for ListInOrder; V is its item.
type InOrder[V any] struct {
	// Name is the collection's: the answer's key and the path of its next
	// link under /v1 ("leases"); Title names it in the 400 refusing another
	// order ("Leases").
	Name, Title string
	// Filters are the query parameters that filter by equality (empty:
	// not filtered), kept in the next link. Owner is the one of them that
	// names the owner project: Scope narrows it to what the caller may list
	// (allocation.Policy.ListScope: nil for all, else the project; or an
	// error, 403).
	Filters []string
	Owner   string
	Scope   func(c echo.Context, owner *string) (*string, error)
	// Get reads an item by uuid (the marker's), ErrNotFound when there is
	// none; NotFound is then the collection's 404 for the marker.
	Get         func(ctx context.Context, ident string) (V, error)
	ErrNotFound error
	NotFound    func(ident string) error
	// List reads up to limit items after id after, in id order, filtered
	// by the Filters' values (absent: not given).
	List func(ctx context.Context, filters map[string]*string, after int64, limit int) ([]V, error)
	// Key is an item's id (creation order) and uuid (the next link's
	// marker); Doc renders it with links under base.
	Key func(v V) (int64, uuid.UUID)
	Doc func(v V, base string) map[string]any
}

// ListInOrder answers GET /v1/{l.Name}: limit (up to maxLimit) and marker
// as ParseListParams reads them (a marker not a uuid is 400, an unknown
// one l.NotFound), 400 for sort_key or sort_dir other than creation order,
// the filters of l, and one page of what the caller may see as
// {l.Name: [...]} with a next link under base when the page is full.
func ListInOrder[V any](c echo.Context, l InOrder[V], base string, maxLimit int) error {
	ctx := c.Request().Context()
	p, err := ParseListParams(c, maxLimit)
	if err != nil {
		return err
	}
	if p.SortKey != "id" || p.SortDesc {
		return BadRequest("%s are listed in creation order only: sort_key and sort_dir are not supported", l.Title)
	}
	filters := map[string]*string{}
	keep := url.Values{}
	for _, name := range l.Filters {
		if s := c.QueryParam(name); s != "" {
			filters[name] = &s
			keep.Set(name, s)
		}
	}
	if project, err := l.Scope(c, filters[l.Owner]); err != nil {
		return err
	} else if project != nil {
		filters[l.Owner] = project
	}
	var after int64
	if p.Marker != "" {
		u, err := uuid.Parse(p.Marker)
		if err != nil {
			return BadRequest("Expected UUID for marker: %s", p.Marker)
		}
		m, err := l.Get(ctx, u.String())
		if errors.Is(err, l.ErrNotFound) {
			return l.NotFound(p.Marker)
		} else if err != nil {
			return err
		}
		after, _ = l.Key(m)
	}
	items, err := l.List(ctx, filters, after, p.Limit)
	if err != nil {
		return err
	}
	docs := make([]map[string]any, 0, len(items))
	for _, v := range items {
		docs = append(docs, l.Doc(v, base))
	}
	out := map[string]any{l.Name: docs}
	if len(items) > 0 {
		_, last := l.Key(items[len(items)-1])
		if next := NextLink(base, l.Name, len(items), p.Limit, last.String(), keep); next != "" {
			out["next"] = next
		}
	}
	return c.JSON(http.StatusOK, out)
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
