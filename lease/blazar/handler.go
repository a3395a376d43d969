// Package blazar serves OpenStack Blazar's lease API (v1) for
// physical:host reservations under /reservation/v1 on metalloc-api, so
// that python-blazarclient (`openstack reservation lease ...`, `openstack
// reservation host ...`) works against metalloc unchanged. It is a view
// of metalloc's one lease model (package lease, /v1/leases): a lease made
// through either API is seen by both. What maps and what does not is in
// docs/api-compatibility.md ("Blazar (leases)").
package blazar

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/allocation"
	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/lease"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

var (
	//go:embed create_schema.json
	createSchemaJSON []byte
	//go:embed update_schema.json
	updateSchemaJSON []byte
	//go:embed host_schema.json
	hostSchemaJSON []byte

	createSchema = web.MustSchema("lease", createSchemaJSON)
	updateSchema = web.MustSchema("lease", updateSchemaJSON)
	hostSchema   = web.MustSchema("host", hostSchemaJSON)
)

// NoProject is the project a lease is booked for when neither the request
// (project_id, a metalloc extension) nor the caller names one: noauth and
// http_basic callers, Ironic's system administrator, have no project.
const NoProject = "admin"

// pageSize is how many rows each read of a list takes (Blazar lists
// everything at once; metalloc reads in pages).
const pageSize = 1000

// Options configures Blazar's API.
type Options struct {
	// Rules are the access rules: leases follow the allocations'
	// (baremetal:allocation:*, the lease's project as the owner), as
	// /v1/leases does; hosts the nodes' (baremetal:node:get, list,
	// list_all; baremetal:node:update:owner to add or remove one, as a
	// PATCH of the node's reservable field).
	Rules auth.Rules
	// EndingNotice is conductor.lease_ending_notice: how long before its
	// end a lease's lease.ending event is sent, shown as before_end_date.
	EndingNotice time.Duration
	// Log gets one line per admission, refusal and change (nil: none).
	Log *zap.Logger
	// Now is the clock (nil: time.Now); tests set it.
	Now func() time.Time
	// Leases is the lease store to serve from (nil: one of its own; the
	// API shares /v1/leases' so that the process keeps one copy of the
	// pool).
	Leases *lease.Store
}

// Handler serves Blazar's lease and os-hosts routes.
type Handler struct {
	pool   *pgxpool.Pool
	leases *lease.Store
	nodes  *node.Store
	opts   Options
	policy allocation.Policy
}

// NewHandler returns a Handler on pool.
func NewHandler(pool *pgxpool.Pool, opts Options) *Handler {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	leases := opts.Leases
	if leases == nil {
		leases = lease.NewStore(pool)
	}
	return &Handler{pool: pool, leases: leases, nodes: node.NewStore(pool), opts: opts,
		policy: allocation.Policy{Rules: opts.Rules}}
}

// Register adds, under Prefix + "/v1": GET and POST /leases, GET, PUT and
// DELETE /leases/{id}; GET and POST /os-hosts, GET, PUT and DELETE
// /os-hosts/{id}. Errors under Prefix are rendered by ErrorHandler, which
// the caller installs (it must also see the router's and authentication's
// errors).
func (h *Handler) Register(e *echo.Echo) {
	g := e.Group(Prefix + "/v1")
	g.GET("/leases", h.list)
	g.POST("/leases", h.create)
	g.GET("/leases/:ident", h.get)
	g.PUT("/leases/:ident", h.update)
	g.DELETE("/leases/:ident", h.delete)
	g.GET("/os-hosts", h.listHosts)
	g.POST("/os-hosts", h.createHost)
	g.GET("/os-hosts/:ident", h.getHost)
	g.PUT("/os-hosts/:ident", h.updateHost)
	g.DELETE("/os-hosts/:ident", h.deleteHost)
}

func (h *Handler) now() time.Time { return h.opts.Now().UTC() }

func leaseNotFound(id string) error {
	return web.NotFound("Object with {'lease_id': '%s'} not found", id)
}

func (h *Handler) doc(v lease.View) map[string]any { return Doc(v, h.now(), h.opts.EndingNotice) }

func (h *Handler) get(c echo.Context) error {
	id := c.Param("ident")
	v, err := h.leases.Visible(c, h.policy, id, leaseNotFound(id))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"lease": h.doc(v)})
}

// list is every lease the caller may see (its project's, or all for a
// caller allowed baremetal:allocation:list_all), in creation order.
func (h *Handler) list(c echo.Context) error {
	ctx := c.Request().Context()
	project, err := h.policy.ListScope(c, nil)
	if err != nil {
		return err
	}
	docs := []map[string]any{}
	var after int64
	for {
		vs, err := h.leases.List(ctx, lease.ListFilter{ProjectID: project}, after, pageSize)
		if err != nil {
			return err
		}
		for _, v := range vs {
			docs = append(docs, h.doc(v))
		}
		if len(vs) < pageSize {
			break
		}
		after = vs[len(vs)-1].ID
	}
	return c.JSON(http.StatusOK, map[string]any{"leases": docs})
}

// createBody is the body of POST /leases (blazarclient's LeaseClientManager.create).
type createBody struct {
	Name          string            `json:"name"`
	StartDate     *string           `json:"start_date"`
	EndDate       string            `json:"end_date"`
	BeforeEndDate *string           `json:"before_end_date"`
	ProjectID     *string           `json:"project_id"`
	Events        []json.RawMessage `json:"events"`
	Reservations  []reservationBody `json:"reservations"`
}

// reservationBody is one physical:host reservation; min and max come as
// numbers from blazarclient, as text from others.
type reservationBody struct {
	ResourceType         string          `json:"resource_type"`
	Min                  json.RawMessage `json:"min"`
	Max                  json.RawMessage `json:"max"`
	HypervisorProperties *string         `json:"hypervisor_properties"`
	ResourceProperties   *string         `json:"resource_properties"`
	BeforeEnd            *string         `json:"before_end"`
}

// readBody reads the request body and validates it against schema (400
// naming the problem).
func readBody(c echo.Context, schema *web.Schema, v any) error {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return web.BadRequest("Could not read the request body: %v", err)
	}
	if _, err := schema.Decode(body); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return web.BadRequest("Invalid request body: %v", err)
	}
	return nil
}

// parseDate reads a date as Blazar takes it, "YYYY-MM-DD HH:MM" in UTC
// (RFC 3339 is accepted too); 400 naming field otherwise.
func parseDate(field, s string) (time.Time, error) {
	if t, err := time.Parse(DateIn, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC().Truncate(time.Second), nil
	}
	return time.Time{}, web.BadRequest("Invalid date format for %s: %q (expected %%Y-%%m-%%d %%H:%%M, e.g. 2030-01-06 09:00, UTC)", field, s)
}

// count reads min or max: a number or its decimal text, 1 to 100000.
func count(field string, raw json.RawMessage) (int, error) {
	s := strings.Trim(string(raw), `"`)
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 100000 {
		return 0, web.BadRequest("Invalid %s %s: a whole number of hosts from 1 to 100000", field, string(raw))
	}
	return n, nil
}

// checkBeforeEnd accepts before_end_date only as the conductors send
// lease.ending: empty, or end minus the notice (to the minute). A time of
// its own per lease is not supported.
func (h *Handler) checkBeforeEnd(s *string, start, end time.Time) error {
	if s == nil || *s == "" {
		return nil
	}
	t, err := parseDate("before_end_date", *s)
	if err != nil {
		return err
	}
	if t.Before(start) || t.After(end) {
		return web.BadRequest("Invalid before_end_date %s: not between the lease's start_date and end_date", *s)
	}
	if want := end.Add(-h.opts.EndingNotice).Truncate(time.Minute); !t.Equal(want) {
		return web.BadRequest("before_end_date %s is not supported: a lease's lease.ending notice is sent "+
			"conductor.lease_ending_notice (%s) before its end, %s for this lease; leave before_end_date out",
			*s, h.opts.EndingNotice, want.Format(DateIn))
	}
	return nil
}

func (h *Handler) create(c echo.Context) error {
	ctx := c.Request().Context()
	var body createBody
	if err := readBody(c, createSchema, &body); err != nil {
		return err
	}
	owner := body.ProjectID
	if err := h.policy.AuthorizeCreate(c, &owner); err != nil {
		return err
	}
	if owner == nil {
		p := auth.Caller(ctx).ProjectID
		if p == "" {
			p = NoProject
		}
		owner = &p
	}
	if _, isUUID := web.UUIDLike(body.Name); isUUID {
		return web.BadRequest("Invalid lease name %q: a name cannot be a UUID", body.Name)
	}
	now := h.now()
	req := lease.Request{UUID: uuid.New(), Name: &body.Name, ProjectID: *owner, OnStart: lease.OnStartAllocate}
	var err error
	if body.StartDate == nil || *body.StartDate == "now" {
		req.Start = now.Truncate(time.Second).Add(time.Second) // the next whole second
	} else if req.Start, err = parseDate("start_date", *body.StartDate); err != nil {
		return err
	} else if req.Start.Before(now.Truncate(time.Minute)) {
		return web.BadRequest("Start date must be later than current date (%s)", now.Format(DateIn))
	}
	if req.End, err = parseDate("end_date", body.EndDate); err != nil {
		return err
	}
	if !req.End.After(req.Start) {
		return web.BadRequest("End date must be later than start date.")
	}
	if err := h.checkBeforeEnd(body.BeforeEndDate, req.Start, req.End); err != nil {
		return err
	}
	if len(body.Events) > 0 {
		return web.BadRequest("Lease events are not supported: the start, end and before-end events are the lease's own")
	}
	if req.Reservations, err = h.reservations(c, body.Reservations); err != nil {
		return err
	}
	v, err := h.leases.Admit(ctx, req, h.opts.Log)
	var refused *lease.RefusedError
	switch {
	case errors.As(err, &refused):
		return web.Conflict("Not enough hosts available: %s", refused.Error())
	case errors.Is(err, lease.ErrContended):
		return web.Conflict("Lease not admitted: %v, %d times; try again.", err, lease.MaxAdmitAttempts)
	case db.IsUniqueViolation(err, "leases_name_key"):
		return web.Conflict("The lease with name: %s already exists", body.Name)
	case err != nil:
		return fmt.Errorf("admitting lease: %w", err)
	}
	return c.JSON(http.StatusCreated, map[string]any{"lease": h.doc(v)})
}

// reservations turns the physical:host reservations into metalloc's:
// count max with min as its floor (lease.Reservation's Min: max when it
// fits, else the most between min and max that do; both are stored and
// shown back, Doc), the resource class,
// traits and node conditions of their filters (Filter). Without
// $resource_class the class is the one the reservable nodes matching the
// rest share (400 when they have several, 409 when none matches).
func (h *Handler) reservations(c echo.Context, bodies []reservationBody) ([]lease.Reservation, error) {
	var pool []node.Node // the reservable nodes, read once when needed
	out := make([]lease.Reservation, len(bodies))
	for i, b := range bodies {
		lo, err := count("min", b.Min)
		if err != nil {
			return nil, err
		}
		hi, err := count("max", b.Max)
		if err != nil {
			return nil, err
		}
		if lo > hi {
			return nil, web.BadRequest("Invalid reservation %d: min %d is greater than max %d", i+1, lo, hi)
		}
		if b.BeforeEnd != nil && *b.BeforeEnd != "" && *b.BeforeEnd != "default" {
			return nil, web.BadRequest("Invalid reservation %d: before_end %q is not supported (only \"default\": "+
				"the lease.ending event)", i+1, *b.BeforeEnd)
		}
		f, err := ParseFilter(i+1, deref(b.ResourceProperties), deref(b.HypervisorProperties))
		if err != nil {
			return nil, err
		}
		r := lease.Reservation{ResourceClass: f.ResourceClass, Traits: f.Traits, Forbidden: f.Forbidden,
			Count: hi, Min: lo, Rule: lease.RuleNone, LevelIndex: -1}
		if f.ResourceClass == "" || f.HasConditions() {
			if pool == nil {
				if pool, err = h.reservable(c, nil); err != nil {
					return nil, err
				}
			}
			classes := map[string]bool{}
			ids := []int64{}
			for _, n := range pool {
				if n.ResourceClass == nil || (f.ResourceClass != "" && *n.ResourceClass != f.ResourceClass) ||
					!hasTraits(n.Traits, f.Traits, f.Forbidden) || !f.Matches(n) {
					continue
				}
				classes[*n.ResourceClass] = true
				ids = append(ids, n.ID)
			}
			if f.ResourceClass == "" {
				switch len(classes) {
				case 0:
					return nil, web.Conflict("Not enough hosts available: no reservable host matches reservation %d "+
						"(resource_properties %q, hypervisor_properties %q)", i+1,
						deref(b.ResourceProperties), deref(b.HypervisorProperties))
				case 1:
					for rc := range classes {
						r.ResourceClass = rc
					}
				default:
					names := make([]string, 0, len(classes))
					for rc := range classes {
						names = append(names, rc)
					}
					slices.Sort(names)
					return nil, web.BadRequest("Invalid reservation %d: the reservable hosts it matches are of several "+
						"resource classes (%s); add [\"=\", \"$resource_class\", \"%s\"] to resource_properties",
						i+1, strings.Join(names, ", "), names[0])
				}
			}
			if f.HasConditions() {
				r.Nodes = ids
			}
		}
		out[i] = r
	}
	return out, nil
}

// hasTraits reports whether a node with traits have has every trait of
// want and none of bad.
func hasTraits(have, want, bad []string) bool {
	for _, t := range want {
		if !slices.Contains(have, t) {
			return false
		}
	}
	for _, t := range bad {
		if slices.Contains(have, t) {
			return false
		}
	}
	return true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// lock reads and locks lease id in the transaction of q for a change
// under rule (lease.Lock): 404 when unknown or hidden, 403 when rule
// forbids.
func (h *Handler) lock(c echo.Context, q *lease.Queries, id, rule string) (lease.Lease, error) {
	return lease.Lock(c.Request().Context(), q, id, func(v lease.View) error {
		return h.policy.Check(c, &v.ProjectID, rule, leaseNotFound(id))
	})
}

// updateBody is the body of PUT /leases/{id} (blazarclient's
// LeaseClientManager.update: --prolong-for and --reduce-by arrive as
// end_date, computed by the client).
type updateBody struct {
	Name          *string          `json:"name"`
	StartDate     *string          `json:"start_date"`
	EndDate       *string          `json:"end_date"`
	BeforeEndDate *string          `json:"before_end_date"`
	Reservations  []map[string]any `json:"reservations"`
}

// update renames a lease and moves its end (lease.MoveEnd: an extension
// is admitted like a new lease, 409 naming the node and lease in the
// way). Its start cannot move (the same start, to the minute, is
// accepted), nor its reservations change (items naming only their id are
// accepted).
func (h *Handler) update(c echo.Context) error {
	ctx := c.Request().Context()
	var body updateBody
	if err := readBody(c, updateSchema, &body); err != nil {
		return err
	}
	for _, r := range body.Reservations {
		for k := range r {
			if k != "id" {
				return web.BadRequest("Changing a reservation (%s) is not supported: metalloc admits a reservation's "+
					"hosts once; create another lease", k)
			}
		}
	}
	id := c.Param("ident")
	var result lease.View
	err := db.InTx(ctx, h.pool, func(tx pgx.Tx) error {
		q := lease.New(tx)
		l, err := h.lock(c, q, id, allocation.RuleUpdate)
		if err != nil {
			return err
		}
		if body.StartDate != nil {
			start, err := parseDate("start_date", *body.StartDate)
			if err != nil {
				return err
			}
			if !start.Equal(l.StartTime.UTC().Truncate(time.Minute)) && !start.Equal(l.StartTime.UTC()) {
				return web.BadRequest("Moving a lease's start_date is not supported (it is %s): create another lease",
					l.StartTime.UTC().Format(DateIn))
			}
		}
		end := l.EndTime.UTC()
		if body.EndDate != nil {
			if end, err = parseDate("end_date", *body.EndDate); err != nil {
				return err
			}
		}
		if err := h.checkBeforeEnd(body.BeforeEndDate, l.StartTime, end); err != nil {
			return err
		}
		if body.Name != nil && (l.Name == nil || *l.Name != *body.Name) {
			if _, isUUID := web.UUIDLike(*body.Name); isUUID {
				return web.BadRequest("Invalid lease name %q: a name cannot be a UUID", *body.Name)
			}
			err := q.SetLeaseName(ctx, lease.SetLeaseNameParams{ID: l.ID, Name: body.Name})
			if db.IsUniqueViolation(err, "leases_name_key") {
				return web.Conflict("The lease with name: %s already exists", *body.Name)
			} else if err != nil {
				return err
			}
		}
		if !end.Equal(l.EndTime) {
			if err := lease.MoveEnd(ctx, q, l, end, h.now(), h.opts.Log); err != nil {
				return err
			}
		}
		result, err = lease.GetIn(ctx, q, l.Uuid.String())
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"lease": h.doc(result)})
}

// delete deletes a lease that is not active, with its rows; an active one
// is ended instead, as Blazar does: its end moves to the next second
// (lease.MoveEnd) and a conductor ends it (allocations deleted, nodes
// back in the pool); it stays listed, TERMINATED, until deleted again.
func (h *Handler) delete(c echo.Context) error {
	ctx := c.Request().Context()
	id := c.Param("ident")
	var gone uuid.UUID
	ended := false
	err := db.InTx(ctx, h.pool, func(tx pgx.Tx) error {
		q := lease.New(tx)
		l, err := h.lock(c, q, id, allocation.RuleDelete)
		if err != nil {
			return err
		}
		gone = l.Uuid
		if l.State == lease.StateActive {
			ended = true
			now := h.now()
			return lease.MoveEnd(ctx, q, l, now.Truncate(time.Second).Add(time.Second), now, h.opts.Log)
		}
		return q.DeleteLease(ctx, l.ID)
	})
	if err != nil {
		return err
	}
	if ended {
		h.opts.Log.Info("active lease ended by a Blazar delete", zap.Stringer("lease", gone))
	} else {
		h.opts.Log.Info("lease deleted", zap.Stringer("lease", gone))
	}
	return c.NoContent(http.StatusNoContent)
}

// reservable reads the reservable nodes (of project, when not nil: owned
// or leased by it), in id order.
func (h *Handler) reservable(c echo.Context, project *string) ([]node.Node, error) {
	on := true
	var out []node.Node
	opts := node.ListOptions{Limit: pageSize, Reservable: &on, Project: project}
	for {
		ns, err := h.nodes.List(c.Request().Context(), opts)
		if err != nil {
			return nil, err
		}
		out = append(out, ns...)
		if len(ns) < pageSize {
			return out, nil
		}
		last := ns[len(ns)-1].UUID
		opts.Marker = &last
	}
}

func (h *Handler) listHosts(c echo.Context) error {
	project, err := node.ListScope(c, h.opts.Rules, "node", nil)
	if err != nil {
		return err
	}
	ns, err := h.reservable(c, project)
	if err != nil {
		return err
	}
	docs := make([]map[string]any, 0, len(ns))
	for _, n := range ns {
		docs = append(docs, HostDoc(n))
	}
	return c.JSON(http.StatusOK, map[string]any{"hosts": docs})
}

var digits = regexp.MustCompile(`^[0-9]{1,18}$`)

func hostNotFound(id string) error {
	return web.NotFound("Object with {'host_id': '%s'} not found", id)
}

// host finds the node named by id: its internal id (all digits: Blazar's
// host id), else its uuid or name: 404 when there is none or the caller
// may not see it (baremetal:node:get), or when reservable asks for a node
// in the pool and it is not; then rules are checked on it (403,
// node.CheckNode).
func (h *Handler) host(c echo.Context, id string, reservable bool, rules ...string) (node.Node, error) {
	ctx := c.Request().Context()
	var n node.Node
	if digits.MatchString(id) {
		num, _ := strconv.ParseInt(id, 10, 64)
		ns, err := h.nodes.List(ctx, node.ListOptions{Limit: 1, ID: &num})
		if err != nil {
			return n, err
		}
		if len(ns) == 0 {
			return n, hostNotFound(id)
		}
		n = ns[0]
		on := true
		in, err := h.nodes.List(ctx, node.ListOptions{Limit: 1, ID: &num, Reservable: &on})
		if err != nil {
			return n, err
		}
		n.Reservable = len(in) > 0
	} else {
		var err error
		if n, err = h.nodes.Get(ctx, id); errors.Is(err, node.ErrNotFound) {
			return n, hostNotFound(id)
		} else if err != nil {
			return n, err
		}
	}
	if err := node.CheckNode(c, h.opts.Rules, n.Owner, n.Lessee, id); err != nil {
		return n, hostNotFound(id) // hidden
	}
	if reservable && !n.Reservable {
		return n, hostNotFound(id)
	}
	return n, node.CheckNode(c, h.opts.Rules, n.Owner, n.Lessee, id, rules...)
}

func (h *Handler) getHost(c echo.Context) error {
	n, err := h.host(c, c.Param("ident"), true)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"host": HostDoc(n)})
}

// createHost puts the node named by name (uuid or name) into the
// reservable pool (node field reservable); extra capabilities are not
// stored (400: set properties.capabilities on the node instead).
func (h *Handler) createHost(c echo.Context) error {
	var body map[string]any
	if err := readBody(c, hostSchema, &body); err != nil {
		return err
	}
	name, _ := body["name"].(string)
	var extras []string
	for k := range body {
		if k != "name" {
			extras = append(extras, k)
		}
	}
	if len(extras) > 0 {
		slices.Sort(extras)
		return web.BadRequest("Extra capabilities (%s) are not supported: set them in the node's properties/capabilities "+
			"(PATCH /v1/nodes/{node})", strings.Join(extras, ", "))
	}
	n, err := h.host(c, name, false, "baremetal:node:update:owner")
	if err != nil {
		return err
	}
	if n.Reservable {
		return web.Conflict("Host %s is already reservable", name)
	}
	if _, err := h.nodes.SetReservable(c.Request().Context(), []string{n.UUID.String()}, true); err != nil {
		return err
	}
	n.Reservable = true
	h.opts.Log.Info("node made reservable by a Blazar host create", zap.Stringer("node", n.UUID))
	return c.JSON(http.StatusCreated, map[string]any{"host": HostDoc(n)})
}

// updateHost refuses: Blazar's host update sets extra capabilities, which
// metalloc keeps in the node's properties.capabilities (PATCH /v1/nodes).
func (h *Handler) updateHost(c echo.Context) error {
	if _, err := h.host(c, c.Param("ident"), true); err != nil {
		return err
	}
	return web.BadRequest("Updating a host's extra capabilities is not supported: set properties/capabilities " +
		"on the node (PATCH /v1/nodes/{node})")
}

// deleteHost takes a reservable node out of the pool (back on demand),
// 409 while a pending or active lease holds it.
func (h *Handler) deleteHost(c echo.Context) error {
	ctx := c.Request().Context()
	id := c.Param("ident")
	n, err := h.host(c, id, true, "baremetal:node:update:owner")
	if err != nil {
		return err
	}
	if n.ResourceClass != nil {
		booked, err := h.leases.Booked(ctx, *n.ResourceClass, n.ID, h.now())
		if err != nil {
			return err
		}
		if booked {
			return web.Conflict("Host %s is booked by a pending or active lease: it stays reservable until they end", id)
		}
	}
	if _, err := h.nodes.SetReservable(ctx, []string{n.UUID.String()}, false); err != nil {
		return err
	}
	h.opts.Log.Info("node made on-demand by a Blazar host delete", zap.Stringer("node", n.UUID))
	return c.NoContent(http.StatusNoContent)
}
