package web

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/auth"
)

// Argument and projection rules shared by Ironic's resources
// (ironic/common/args.py and api/controllers/v1/utils.py), with Ironic's
// messages.

var (
	trueStrings  = []string{"1", "t", "true", "on", "y", "yes"}
	falseStrings = []string{"0", "f", "false", "off", "n", "no"}
)

// ParseBool is Ironic's args.boolean (strutils.bool_from_string, strict): a
// JSON boolean or one of its words; anything else is 400 naming name.
func ParseBool(name string, v any) (bool, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		s := strings.ToLower(strings.TrimSpace(x))
		if slices.Contains(trueStrings, s) {
			return true, nil
		}
		if slices.Contains(falseStrings, s) {
			return false, nil
		}
	}
	acc := slices.Concat(trueStrings, falseStrings)
	slices.Sort(acc)
	for i, a := range acc {
		acc[i] = "'" + a + "'"
	}
	shown, ok := v.(string)
	if !ok {
		shown = PyRepr(v)
	}
	return false, BadRequest("Invalid %s: Unrecognized value '%s', acceptable values are: %s",
		name, shown, strings.Join(acc, ", "))
}

// ReturnFields is Ironic's get_request_return_fields for a list: detail (the
// parsed ?detail, nil when absent) needs 1.43 and cannot come with fields;
// with neither, the resource's defaults.
func ReturnFields(c echo.Context, fields []string, detail *bool, defaults []string) ([]string, error) {
	if detail != nil && !RequestVersion(c).AtLeast(1, 43) {
		return nil, BadRequest("Invalid query parameter ?detail=%s received.", c.QueryParam("detail"))
	}
	if fields != nil && detail != nil && *detail {
		return nil, BadRequest("Can not specify ?detail=True and fields in the same request.")
	}
	if fields == nil && (detail == nil || !*detail) {
		return defaults, nil
	}
	return fields, nil
}

// ProjectFields is Ironic's check_for_invalid_fields then sanitize_dict: a
// field doc lacks is 400, and only fields (and links) are kept; nil fields
// keep everything.
func ProjectFields(doc map[string]any, fields []string) (map[string]any, error) {
	if fields == nil {
		return doc, nil
	}
	var bad []string
	for _, f := range fields {
		if _, ok := doc[f]; !ok {
			bad = append(bad, f)
		}
	}
	if len(bad) > 0 {
		return nil, BadRequest(`Field(s) "%s" are not valid`, strings.Join(bad, ", "))
	}
	return Project(doc, fields), nil
}

// RequestNextLink is NextLink for a list request: the next page of resource
// after the item lastUUID when the page of n items came back full, keeping
// the request's other query arguments, as Ironic's collection links do.
func RequestNextLink(c echo.Context, base, resource string, n, limit int, lastUUID string) string {
	keep := url.Values{}
	for k, vs := range c.QueryParams() {
		if k != "limit" && k != "marker" {
			keep[k] = vs
		}
	}
	return NextLink(base, resource, n, limit, lastUUID, keep)
}

// CheckArgs is Ironic's args.validate refusing unexpected keyword
// arguments: query parameters (and body keys) outside allowed are 400
// "Unexpected arguments: a, b".
func CheckArgs(c echo.Context, body map[string]any, allowed ...string) error {
	var extra []string
	for k := range c.QueryParams() {
		if !slices.Contains(allowed, k) {
			extra = append(extra, k)
		}
	}
	for k := range body {
		if !slices.Contains(allowed, k) && !slices.Contains(extra, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		return BadRequest("Unexpected arguments: %s", strings.Join(extra, ", "))
	}
	return nil
}

// RecordListArgs checks the arguments of a GET of a collection of records
// (chassis, deploy templates) before the access rule, as args.validate
// does: only allowed ones, limit an integer, detail a boolean (returned,
// nil when absent).
func RecordListArgs(c echo.Context, allowed ...string) (detail *bool, err error) {
	if err := CheckArgs(c, nil, allowed...); err != nil {
		return nil, err
	}
	q := c.QueryParams()
	if q.Has("limit") {
		if _, err := strconv.Atoi(strings.TrimSpace(q.Get("limit"))); err != nil {
			return nil, BadRequest("Expected an integer for limit: %s", q.Get("limit"))
		}
	}
	if q.Has("detail") {
		b, err := ParseBool("detail", q.Get("detail"))
		if err != nil {
			return nil, err
		}
		detail = &b
	}
	return detail, nil
}

// RecordListPage reads the rest of a record list request after the access
// rule: the fields to show (none on a /detail path: everything; else
// ReturnFields with defaults) and the page, whose sort key must be one of
// sortKeys (the invalid ones are refused by name first, as Ironic does).
func RecordListPage(c echo.Context, detailPath bool, detail *bool, defaults []string, maxLimit int,
	invalidSort, sortKeys []string) ([]string, ListParams, error) {
	var fields []string
	if !detailPath {
		var err error
		if fields, err = ParseFields(c); err != nil {
			return nil, ListParams{}, err
		}
		if fields, err = ReturnFields(c, fields, detail, defaults); err != nil {
			return nil, ListParams{}, err
		}
	}
	lp, err := ParseListParams(c, maxLimit)
	if err != nil {
		return nil, lp, err
	}
	if slices.Contains(invalidSort, lp.SortKey) {
		return nil, lp, BadRequest("The sort_key value %s is an invalid field for sorting", lp.SortKey)
	}
	if !slices.Contains(sortKeys, lp.SortKey) {
		return nil, lp, BadRequest("The sort_key value \"%s\" is an invalid field for sorting", lp.SortKey)
	}
	return fields, lp, nil
}

// ListAnswer answers a list request with Ironic's collection document
// {"<key>": [rendered items], "next": the page after the last item} for a
// page of items read with limit; resource is the collection's path for
// the next link ("ports", "ports/detail").
func ListAnswer[T any](c echo.Context, base, key, resource string, limit int, items []T,
	render func(*T) (map[string]any, error), uuidOf func(*T) string) error {
	docs := make([]map[string]any, 0, len(items))
	for i := range items {
		doc, err := render(&items[i])
		if err != nil {
			return err
		}
		docs = append(docs, doc)
	}
	resp := map[string]any{key: docs}
	if len(items) > 0 {
		if next := RequestNextLink(c, base, resource, len(items), limit, uuidOf(&items[len(items)-1])); next != "" {
			resp["next"] = next
		}
	}
	return c.JSON(http.StatusOK, resp)
}

// ResourceOptions configure the handlers of an Ironic resource.
type ResourceOptions struct {
	// PublicEndpoint is the base URL of links and Location headers ("" =
	// scheme://host of each request).
	PublicEndpoint string
	// MaxLimit caps list page sizes and is the default page size (0 =
	// DefaultMaxLimit).
	MaxLimit int
	// Rules are the access rules (Ironic's defaults in keystone mode; the
	// zero value allows everything, as Ironic's noauth and http_basic do).
	Rules auth.Rules
}

// WithDefaults returns o with MaxLimit defaulted.
func (o ResourceOptions) WithDefaults() ResourceOptions {
	if o.MaxLimit <= 0 {
		o.MaxLimit = DefaultMaxLimit
	}
	return o
}

// Base is the base URL of the request's links.
func (o ResourceOptions) Base(c echo.Context) string { return PublicURL(c, o.PublicEndpoint) }
