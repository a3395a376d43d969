package conductorapi

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// HandlerOptions configures the conductor endpoints of the Ironic API.
type HandlerOptions struct {
	// PublicEndpoint is the base URL used in links; empty means the
	// request's scheme and host.
	PublicEndpoint string
	// MaxLimit caps page sizes (Ironic [api]max_limit, default 1000).
	MaxLimit int
	// Rules are the access rules (baremetal:conductor:get in keystone
	// mode; the zero value allows everything).
	Rules auth.Rules
}

// Handler serves GET /v1/conductors and GET /v1/conductors/{hostname} as
// Ironic does from microversion 1.49: every registered conductor, online or
// not, with alive telling whether it is online and its expiry (written by
// the conductor itself at every heartbeat) has not passed
// (metalloc_conductor_alive).
type Handler struct {
	q    *Queries
	opts HandlerOptions
}

// NewHandler returns a Handler reading the conductors table through db (a
// pool, normally).
func NewHandler(db DBTX, opts HandlerOptions) *Handler {
	if opts.MaxLimit <= 0 {
		opts.MaxLimit = web.DefaultMaxLimit
	}
	return &Handler{q: New(db), opts: opts}
}

// Register adds GET /conductors and GET /conductors/:hostname under v1 (a
// group with Ironic version negotiation). Below 1.49 both answer 404
// "Resource could not be found.", as Ironic does; other methods are 405 at
// every version (the resource is read-only), with Allow: GET. It also adds
// the operator page's GET /ui/conductors (uiList, at any version).
func (h *Handler) Register(v1 *echo.Group) {
	v1.GET("/conductors", h.list, requireConductors, h.canGet)
	v1.GET("/conductors/:hostname", h.get, requireConductors, h.canGet)
	v1.GET("/ui/conductors", h.uiList, h.canGet)
	readOnly := []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	v1.Match(readOnly, "/conductors", web.ReadOnly)
	v1.Match(readOnly, "/conductors/:hostname", web.ReadOnly)
}

// requireConductors hides the endpoints below microversion 1.49.
func requireConductors(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !web.RequestVersion(c).AtLeast(1, 49) {
			return web.NotFound("Resource could not be found.")
		}
		return next(c)
	}
}

// docFields are the fields of a conductor document (`fields` accepts these).
var docFields = map[string]bool{
	"hostname": true, "conductor_group": true, "alive": true, "drivers": true,
	"created_at": true, "updated_at": true, "links": true,
}

// listDefaultFields are what a list shows without fields or detail=True.
var listDefaultFields = []string{"hostname", "conductor_group", "alive"}

// newerNodeFields are Ironic's version-gated node fields that appeared after
// 1.49, with the minor version each needs. Ironic checks `fields` and
// `sort_key` of the conductor endpoints against that table too, so naming one
// of them below its version is 406 rather than 400; mirrored here.
var newerNodeFields = map[string]int{
	"owner": 50, "description": 51, "allocation_uuid": 52, "events": 54,
	"retired": 61, "retired_reason": 61, "lessee": 65, "network_data": 66,
	"boot_mode": 75, "secure_boot": 75, "shard": 82,
}

// checkVersionedNames is Ironic's 406 for names newer than the request.
func checkVersionedNames(names []string, ver web.Version) error {
	for _, n := range names {
		if minor, ok := newerNodeFields[n]; ok && !ver.AtLeast(1, minor) {
			return web.Errorf(http.StatusNotAcceptable, "Request not acceptable.")
		}
	}
	return nil
}

// unsortable are conductor fields Ironic refuses as sort keys by name;
// sortable are the columns it can sort by (the conductors table's).
var (
	unsortable = []string{"alive", "drivers"}
	sortable   = []string{"id", "hostname", "conductor_group", "version", "online", "created_at", "updated_at"}
)

// view is one conductor as the API shows it.
type view ConductorDocRow

// doc renders v as Ironic's conductor document.
func (v view) doc(base string) map[string]any {
	drivers := v.Drivers
	if drivers == nil {
		drivers = []string{}
	}
	return map[string]any{
		"hostname":        v.Hostname,
		"conductor_group": v.ConductorGroup,
		"alive":           v.Alive,
		"drivers":         drivers,
		"created_at":      web.Timestamp(&v.CreatedAt),
		"updated_at":      web.Timestamp(&v.UpdatedAt),
		"links":           web.ResourceLinks(base, "conductors", v.Hostname),
	}
}

func (h *Handler) base(c echo.Context) string { return web.PublicURL(c, h.opts.PublicEndpoint) }

// checkName is Ironic's validation of hostname and marker: a logical name
// (RFC 3986 unreserved characters, at most 255), else 400.
func checkName(param, value string) error {
	if !web.ValidLogicalName(value, web.IronicMaxVersion) {
		return web.BadRequest("Expected name for %s: %s", param, value)
	}
	return nil
}

// parseBool reads a boolean query value as Ironic does (oslo's strict
// bool_from_string); anything else is 400.
func parseBool(param, value string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(value)) {
	case "1", "t", "true", "on", "y", "yes":
		return true, nil
	case "0", "f", "false", "off", "n", "no":
		return false, nil
	}
	return false, web.BadRequest("Invalid %s: Unrecognized value '%s', acceptable values are: "+
		"'0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'", param, value)
}

// lookup returns the conductor named hostname; unknown is Ironic's 404.
func (h *Handler) lookup(c echo.Context, hostname string) (view, error) {
	row, err := h.q.ConductorDoc(c.Request().Context(), hostname)
	if errors.Is(err, pgx.ErrNoRows) {
		return view{}, web.NotFound("Conductor %s could not be found.", hostname)
	} else if err != nil {
		return view{}, fmt.Errorf("reading conductor %s: %w", hostname, err)
	}
	return view(row), nil
}

// list serves GET /v1/conductors: limit, marker (a hostname), sort_key,
// sort_dir, fields, detail. Without fields or detail=True each conductor
// shows hostname, conductor_group and alive (plus links); detail=True shows
// every field; fields and detail=True together are 400. A full page carries
// a next link that repeats sort_key, sort_dir, detail and fields, as
// Ironic's does.
func (h *Handler) list(c echo.Context) error {
	ctx := c.Request().Context()
	ver := web.RequestVersion(c)
	var detail *bool
	if s := c.QueryParam("detail"); s != "" {
		d, err := parseBool("detail", s)
		if err != nil {
			return err
		}
		detail = &d
	}
	if m := c.QueryParam("marker"); m != "" {
		if err := checkName("marker", m); err != nil {
			return err
		}
	}
	p, err := web.ParseListParams(c, h.opts.MaxLimit)
	if err != nil {
		return err
	}
	if err := checkVersionedNames(p.Fields, ver); err != nil {
		return err
	}
	if err := checkVersionedNames([]string{p.SortKey}, ver); err != nil {
		return err
	}
	fields := p.Fields
	switch {
	case fields != nil && detail != nil && *detail:
		return web.BadRequest("Can not specify ?detail=True and fields in the same request.")
	case fields == nil && (detail == nil || !*detail):
		fields = listDefaultFields
	}
	if slices.Contains(unsortable, p.SortKey) {
		return web.BadRequest("The sort_key value %s is an invalid field for sorting", p.SortKey)
	}
	if !slices.Contains(sortable, p.SortKey) {
		return web.BadRequest("The sort_key value \"%s\" is an invalid field for sorting", p.SortKey)
	}
	if err := web.CheckFields(fields, docFields); err != nil {
		return err
	}
	var markerID int64
	if p.Marker != "" {
		m, err := h.lookup(c, p.Marker)
		if err != nil {
			return err
		}
		markerID = m.ID
	}
	rows, err := h.q.ListConductors(ctx, ListConductorsParams{
		MarkerID: markerID, Descending: p.SortDesc, MaxRows: int32(min(p.Limit, math.MaxInt32)),
		SortKey: p.SortKey,
	})
	if err != nil {
		return fmt.Errorf("listing conductors: %w", err)
	}
	base := h.base(c)
	docs := make([]map[string]any, 0, len(rows))
	for _, r := range rows {
		docs = append(docs, web.Project(view(r).doc(base), fields))
	}
	out := map[string]any{"conductors": docs}
	if len(rows) > 0 {
		keep := url.Values{}
		keep.Set("sort_key", p.SortKey)
		keep.Set("sort_dir", "asc")
		if p.SortDesc {
			keep.Set("sort_dir", "desc")
		}
		if detail != nil {
			keep.Set("detail", pythonBool(*detail))
		}
		if fields != nil {
			keep.Set("fields", strings.Join(fields, ","))
		}
		if next := web.NextLink(base, "conductors", len(rows), p.Limit, rows[len(rows)-1].Hostname, keep); next != "" {
			out["next"] = next
		}
	}
	return c.JSON(http.StatusOK, out)
}

// pythonBool spells b as Ironic's next links do ("True", "False").
func pythonBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// get serves GET /v1/conductors/{hostname}: every field, or those named in
// fields (plus links). An unknown hostname is 404 "Conductor <hostname>
// could not be found."; one that is not a logical name is 400.
func (h *Handler) get(c echo.Context) error {
	hostname := c.Param("hostname")
	if u, err := url.PathUnescape(hostname); err == nil {
		hostname = u
	}
	if err := checkName("hostname", hostname); err != nil {
		return err
	}
	fields, err := web.ParseFields(c)
	if err != nil {
		return err
	}
	if err := checkVersionedNames(fields, web.RequestVersion(c)); err != nil {
		return err
	}
	if err := web.CheckFields(fields, docFields); err != nil {
		return err
	}
	v, err := h.lookup(c, hostname)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, web.Project(v.doc(h.base(c)), fields))
}

// canGet is Ironic's baremetal:conductor:get check (403), run after the
// microversion gate.
func (h *Handler) canGet(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		creds := auth.Caller(c.Request().Context())
		if !h.opts.Rules.Allowed("baremetal:conductor:get", auth.Target(creds), creds) {
			return node.Forbidden("baremetal:conductor:get")
		}
		return next(c)
	}
}
