package allocation

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/trait"
	"github.com/metalloc/metalloc/web"
)

var (
	//go:embed create_schema.json
	createSchemaJSON []byte
	//go:embed patch_schema.json
	patchSchemaJSON []byte

	// traits are Ironic's TRAITS_SCHEMA.
	createSchema = web.MustSchemaWith("allocation", createSchemaJSON, func(doc map[string]any) {
		doc["properties"].(map[string]any)["traits"].(map[string]any)["items"] = trait.Schema()
	})
	patchSchema = web.MustSchema("patch", patchSchemaJSON)
)

// HandlerOptions configures the allocation API.
type HandlerOptions struct {
	// PublicEndpoint is the base URL used in links; empty means the
	// request's scheme and host.
	PublicEndpoint string
	// MaxLimit caps page sizes (Ironic [api]max_limit, default 1000).
	MaxLimit int
	// Created, if not nil, counts allocations created (each 201 of POST
	// /v1/allocations); see NewCreatedCounter.
	Created prometheus.Counter
	// Rules are the access rules (Ironic's baremetal:allocation:* in
	// keystone mode; the zero value allows everything).
	Rules auth.Rules
	// Hub, when set, enables the metalloc extensions without polling:
	// Prefer: wait on POST /v1/allocations and GET
	// /v1/allocations/{ident}, and GET /v1/allocations/events (wait.go).
	Hub *Hub
	// MaxWait caps Prefer: wait (api.max_wait, default 60 s).
	MaxWait time.Duration
	// RequestTimeout bounds each database read of a wait or stream
	// (api.request_timeout): those requests skip the whole-request
	// timeout (see LongRequest).
	RequestTimeout time.Duration
	// EventsHeartbeat is the interval of the comment lines that keep an
	// idle event stream open (api.events_heartbeat, default 15 s).
	EventsHeartbeat time.Duration
	// PollWindow and PollHold (api.poll_window, api.poll_hold; either 0:
	// off; needs Hub): a GET /v1/allocations/{ident} of an allocation
	// still allocating that comes less than PollWindow after this
	// process's previous answer for it (a client polling faster than
	// that) is held until the allocation leaves allocating or PollHold
	// has passed, as an implicit Prefer: wait (no Preference-Applied). A
	// polling client learns of the change the moment it happens and sends
	// about one GET per PollHold meanwhile instead of one per its own
	// interval; a single GET, and polls PollWindow apart or more
	// (openstacksdk's 2 s), are answered at once. A hold ends by half
	// the time its request has left (the request's deadline, from
	// api.request_timeout), so that a PollHold at or above it answers
	// the state then rather than a 503.
	PollWindow, PollHold time.Duration
}

// Handler serves the allocation endpoints of the Ironic API.
type Handler struct {
	store *Store
	opts  HandlerOptions
	polls *pollMarks // nil without PollWindow, PollHold or Hub
}

// NewHandler returns a Handler on store.
func NewHandler(store *Store, opts HandlerOptions) *Handler {
	if opts.MaxLimit <= 0 {
		opts.MaxLimit = web.DefaultMaxLimit
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultMaxWait
	}
	if opts.EventsHeartbeat <= 0 {
		opts.EventsHeartbeat = DefaultEventsHeartbeat
	}
	h := &Handler{store: store, opts: opts}
	if opts.PollWindow > 0 && opts.PollHold > 0 && opts.Hub != nil {
		h.polls = newPollMarks(opts.PollWindow)
	}
	return h
}

// Register adds the routes under v1 (a group with Ironic version negotiation):
// /v1/allocations[/{ident}] and /v1/nodes/{ident}/allocation, and the
// event stream GET /v1/allocations/events (only for requests that accept
// text/event-stream; any other GET of that path shows the allocation named
// "events", a valid Ironic name).
func (h *Handler) Register(v1 *echo.Group) {
	// Each route is wrapped on its own: a group middleware would also wrap
	// echo's not-found handler for every other /v1 path.
	// Identifiers are checked with Ironic's messages: GET and DELETE
	// validate the argument allocation_ident, PATCH looks it up after its
	// own gate (patch: get_rpc_allocation's InvalidUuidOrName),
	// /nodes/{ident}/allocation is found by the node _lookup, before the
	// version gate.
	gate := web.GateResource(52, "allocations") // 404 for GET, 405 otherwise, as Ironic
	arg := checkIdent("Expected UUID or name for allocation_ident: %s")
	node := checkIdent("Expected UUID or name for node: %s")
	v1.POST("/allocations", gate(h.create))
	v1.GET("/allocations", gate(h.list))
	v1.GET("/allocations/events", gate(h.events))
	v1.GET("/allocations/:ident", gate(arg(h.get)))
	v1.PATCH("/allocations/:ident", gate(h.patch))
	v1.DELETE("/allocations/:ident", gate(arg(h.delete)))
	v1.GET("/nodes/:ident/allocation", node(requireNodeAllocation(h.getForNode)))
	v1.DELETE("/nodes/:ident/allocation", node(requireNodeAllocation(h.deleteForNode)))
}

// requireNodeAllocation hides /nodes/{ident}/allocation below 1.52 as
// Ironic's node _lookup does: 404 "The resource could not be found." for
// every method.
func requireNodeAllocation(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !web.RequestVersion(c).AtLeast(1, 52) {
			return web.NotFound("The resource could not be found.")
		}
		return next(c)
	}
}

// checkIdent returns a middleware that refuses a path identifier that is
// neither a uuid nor a valid logical name with 400 and the message format
// (one %s: the percent-decoded identifier), as Ironic checks identifiers
// before looking them up.
func checkIdent(format string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if err := validIdent(c, format); err != nil {
				return err
			}
			return next(c)
		}
	}
}

// validIdent is checkIdent's check.
func validIdent(c echo.Context, format string) error {
	ident := web.PathIdent(c)
	if _, ok := web.UUIDLike(ident); !ok && !web.ValidLogicalName(ident, web.IronicMaxVersion) {
		return web.BadRequest(format, ident)
	}
	return nil
}

func (h *Handler) base(c echo.Context) string { return web.PublicURL(c, h.opts.PublicEndpoint) }

// validFields is Fields as a set, for `fields` validation.
var validFields = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range Fields {
		m[f] = true
	}
	return m
}()

func (h *Handler) list(c echo.Context) error {
	ctx := c.Request().Context()
	ver := web.RequestVersion(c)
	p, err := web.ParseListParams(c, h.opts.MaxLimit)
	if err != nil {
		return err
	}
	if err := h.checkFields(p.Fields, ver); err != nil {
		return err
	}
	var f ListFilter
	keep := url.Values{}
	if s := c.QueryParam("state"); s != "" {
		f.State = &s
		keep.Set("state", s)
	}
	if s := c.QueryParam("resource_class"); s != "" {
		f.ResourceClass = &s
		keep.Set("resource_class", s)
	}
	if s := c.QueryParam("owner"); s != "" {
		if !ver.AtLeast(1, 60) {
			return web.Errorf(http.StatusNotAcceptable, "Request not acceptable.")
		}
		f.Owner = &s
		keep.Set("owner", s)
	}
	if project, err := node.ListScope(c, h.opts.Rules, "allocation", f.Owner); err != nil {
		return err
	} else if project != nil {
		f.Owner = project
	}
	if s := c.QueryParam("node"); s != "" {
		id, err := nodeID(ctx, h.store.q, s)
		if err != nil {
			return err
		}
		f.NodeID = &id
		keep.Set("node", s)
	}
	if slices.Contains([]string{"extra", "candidate_nodes", "traits"}, p.SortKey) {
		return web.BadRequest("The sort_key value %s is an invalid field for sorting", p.SortKey)
	}
	if _, ok := sortColumns[p.SortKey]; !ok {
		return web.BadRequest("The sort_key value \"%s\" is an invalid field for sorting", p.SortKey)
	}
	var markerID int64
	if p.Marker != "" {
		u, err := uuid.Parse(p.Marker)
		if err != nil {
			return web.BadRequest("Expected UUID for marker: %s", p.Marker)
		}
		m, err := h.store.Get(ctx, u.String())
		if errors.Is(err, ErrNotFound) {
			return web.NotFound("Allocation %s could not be found.", p.Marker)
		} else if err != nil {
			return err
		}
		markerID = m.ID
	}
	views, err := h.store.List(ctx, f, p.SortKey, p.SortDesc, markerID, p.Limit)
	if err != nil {
		return err
	}
	base := h.base(c)
	docs := make([]map[string]any, 0, len(views))
	for _, v := range views {
		docs = append(docs, web.Project(v.Doc(base, ver), p.Fields))
	}
	out := map[string]any{"allocations": docs}
	if p.Fields != nil {
		keep.Set("fields", strings.Join(p.Fields, ","))
	}
	if c.QueryParam("sort_key") != "" {
		keep.Set("sort_key", p.SortKey)
	}
	if c.QueryParam("sort_dir") != "" {
		keep.Set("sort_dir", c.QueryParam("sort_dir"))
	}
	if len(views) > 0 {
		if next := web.NextLink(base, "allocations", len(views), p.Limit, views[len(views)-1].Uuid.String(), keep); next != "" {
			out["next"] = next
		}
	}
	return c.JSON(http.StatusOK, out)
}

// checkFields validates `fields` for allocations: unknown names are 400,
// owner below 1.60 is 406 (Ironic).
func (h *Handler) checkFields(fields []string, ver web.Version) error {
	if fields == nil {
		return nil
	}
	if slices.Contains(fields, "owner") && !ver.AtLeast(1, 60) {
		return web.Errorf(http.StatusNotAcceptable, "Request not acceptable.")
	}
	return web.CheckFields(fields, validFields)
}

// requestFields is the request's `fields` (nil: every field), checked
// as checkFields does.
func (h *Handler) requestFields(c echo.Context, ver web.Version) ([]string, error) {
	fields, err := web.ParseFields(c)
	if err != nil {
		return nil, err
	}
	return fields, h.checkFields(fields, ver)
}

func (h *Handler) lookup(c echo.Context, ident string) (View, error) {
	u, byUUID := web.UUIDLike(ident)
	if byUUID {
		if v, ok := h.opts.Hub.cached(u); ok {
			return v, nil
		}
	}
	var gen uint64
	if byUUID {
		gen = h.opts.Hub.cacheBegin(u) // before the read: see cache.go
	}
	ctx, cancel := h.readContext(c)
	defer cancel()
	v, err := h.store.Get(ctx, ident)
	if errors.Is(err, ErrNotFound) {
		return v, web.NotFound("Allocation %s could not be found.", ident)
	}
	if err == nil {
		h.opts.Hub.cacheFill(gen, v)
	}
	return v, err
}

func (h *Handler) get(c echo.Context) error {
	ver := web.RequestVersion(c)
	fields, err := h.requestFields(c, ver)
	if err != nil {
		return err
	}
	ident := c.Param("ident")
	wait, waiting := h.preferWait(c)
	var w *Waiter
	if u, ok := web.UUIDLike(ident); ok && waiting {
		w = h.opts.Hub.Watch(u) // before the read: no change is missed
		defer w.Close()
	}
	v, err := h.show(c, ident)
	if err != nil {
		return err
	}
	if waiting {
		h.applied(c, wait)
		if v, err = h.await(c, v, ident, w, wait); errors.Is(err, errGone) {
			return web.NotFound("Allocation %s could not be found.", ident)
		} else if err != nil {
			return err
		}
	} else if h.polls != nil && v.State == StateAllocating && h.polls.polling(v.Uuid, time.Now()) {
		// A client polling: answered when the allocation changes or
		// after PollHold (HandlerOptions.PollWindow, PollHold), or half
		// the time its request has left (api.request_timeout ends a plain
		// GET: a hold that outlasted it would answer 503).
		hold := h.opts.PollHold
		if deadline, ok := c.Request().Context().Deadline(); ok {
			hold = min(hold, time.Until(deadline)/2)
		}
		if v, err = h.await(c, v, ident, nil, hold); errors.Is(err, errGone) {
			return web.NotFound("Allocation %s could not be found.", ident)
		} else if err != nil {
			return err
		}
	}
	if h.polls != nil {
		h.polls.answered(v.Uuid, v.State == StateAllocating, time.Now())
	}
	return writeDoc(c, http.StatusOK, v, h.base(c), ver, fields)
}

func (h *Handler) getForNode(c echo.Context) error {
	ctx := c.Request().Context()
	ver := web.RequestVersion(c)
	fields, err := h.requestFields(c, ver)
	if err != nil {
		return err
	}
	ident := c.Param("ident")
	id, err := nodeID(ctx, h.store.q, ident) // unknown node: 400, as Ironic
	if err != nil {
		return err
	}
	if err := h.checkNodeVisible(c, h.store.q, id, ident); err != nil {
		return err
	}
	views, err := h.store.List(ctx, ListFilter{NodeID: &id}, "id", false, 0, 1)
	if err != nil {
		return err
	}
	if len(views) == 0 {
		return web.NotFound("Allocation for node %s was not found", ident)
	}
	if err := h.checkAllocation(c, views[0], ident, ""); err != nil {
		return err
	}
	return writeDoc(c, http.StatusOK, views[0], h.base(c), ver, fields)
}

func (h *Handler) patch(c echo.Context) error {
	ctx := c.Request().Context()
	ver := web.RequestVersion(c)
	// Ironic's order: the patch document, the version, the identifier.
	body, err := ReadPatchBody(c)
	if err != nil {
		return err
	}
	if !ver.AtLeast(1, 57) {
		return web.Errorf(http.StatusMethodNotAllowed, "The API version does not allow updating allocations")
	}
	if err := validIdent(c, "Expected a logical name or UUID but received %s."); err != nil {
		return err
	}
	ops, patch, err := ReadPatch(body, "name", "extra")
	if err != nil {
		return err
	}
	for _, op := range ops {
		if strings.Split(strings.TrimPrefix(op.Path, "/"), "/")[0] == "name" && op.Op != "remove" {
			var name *string
			if err := json.Unmarshal(op.Value, &name); err != nil {
				return web.BadRequest("Schema error for allocation: /name: expected string or null")
			}
			if name != nil && *name != "" && !web.ValidLogicalName(*name, ver) {
				return web.BadRequest("Cannot update allocation with invalid name '%s'", *name)
			}
		}
	}
	var result View
	err = db.InTx(ctx, h.store.pool, func(tx pgx.Tx) error {
		q := New(tx)
		v, err := get(ctx, q, c.Param("ident"))
		if errors.Is(err, ErrNotFound) {
			return web.NotFound("Allocation %s could not be found.", c.Param("ident"))
		} else if err != nil {
			return err
		}
		if err := h.checkAllocation(c, v, c.Param("ident"), ruleUpdate); err != nil {
			return err
		}
		if _, err := q.LockAllocation(ctx, v.ID); errors.Is(err, pgx.ErrNoRows) { // deleted meanwhile
			return web.NotFound("Allocation %s could not be found.", c.Param("ident"))
		} else if err != nil {
			return err
		}
		doc := map[string]any{"name": v.Name, "extra": json.RawMessage(v.Extra)}
		if len(v.Extra) == 0 {
			doc["extra"] = map[string]any{}
		}
		var out struct {
			Name  *string        `json:"name"`
			Extra map[string]any `json:"extra"`
		}
		if err := ApplyPatch(patch, doc, &out); err != nil {
			return err
		}
		out.Name = NoName(out.Name)
		extra, err := ExtraJSON(out.Extra)
		if err != nil {
			return err
		}
		err = q.UpdateAllocationNameExtra(ctx, UpdateAllocationNameExtraParams{Name: out.Name, Extra: extra, ID: v.ID})
		if db.IsUniqueViolation(err, "allocations_name_key") {
			return web.Conflict("An allocation with name %s already exists.", deref(out.Name))
		} else if err != nil {
			return err
		}
		result, err = get(ctx, q, v.Uuid.String())
		return err
	})
	if err != nil {
		return err
	}
	h.opts.Hub.cacheForget(result.Uuid)
	return writeDoc(c, http.StatusOK, result, h.base(c), ver, nil)
}

func (h *Handler) delete(c echo.Context) error {
	ident := c.Param("ident")
	return h.destroy(c, func(q *Queries) (View, error) {
		v, err := ref(c.Request().Context(), q, ident)
		if errors.Is(err, ErrNotFound) {
			return v, web.NotFound("Allocation %s could not be found.", ident)
		} else if err != nil {
			return v, err
		}
		return v, h.checkAllocation(c, v, ident, ruleDelete)
	})
}

func (h *Handler) deleteForNode(c echo.Context) error {
	ctx := c.Request().Context()
	ident := c.Param("ident")
	return h.destroy(c, func(q *Queries) (View, error) {
		id, err := nodeID(ctx, q, ident)
		var apiErr *web.Error
		if errors.As(err, &apiErr) {
			return View{}, web.NotFound("Node %s could not be found.", ident)
		} else if err != nil {
			return View{}, err
		}
		if err := h.checkNodeVisible(c, q, id, ident); err != nil {
			return View{}, err
		}
		views, err := h.store.List(ctx, ListFilter{NodeID: &id}, "id", false, 0, 1)
		if err != nil {
			return View{}, err
		}
		if len(views) == 0 {
			return View{}, web.NotFound("Allocation for node %s was not found", ident)
		}
		return views[0], h.checkAllocationRule(c, views[0], ruleDelete)
	})
}

// destroy deletes the allocation find returns, releasing its node; 409
// when the node is active or mid-operation and not in maintenance (Ironic:
// verify_node_for_deallocation). find reads without locks; one statement
// then takes the locks in the documented order, node then allocation,
// checks the node and deallocates (Store.Destroy, shared with concurrent
// DELETEs). When the
// allocation turned out to have moved meanwhile (a conductor reserved a
// node for it, the node was deleted) it reads and tries again, up to
// db.MaxTxAttempts times.
func (h *Handler) destroy(c echo.Context, find func(*Queries) (View, error)) error {
	ctx := c.Request().Context()
	err := db.Retry(ctx, func() error {
		v, err := find(h.store.q)
		if err != nil {
			return err
		}
		defer h.opts.Hub.cacheForget(v.Uuid)
		d, err := h.store.Destroy(ctx, v.ID, v.NodeID)
		switch {
		case err != nil:
			return err
		case d.Outcome == "gone":
			return web.NotFound("Allocation %s could not be found.", v.Uuid)
		case d.Outcome == "moved":
			return db.ErrRestart
		case d.Outcome == "blocked":
			var target *string
			if d.TargetProvisionState != "" {
				target = &d.TargetProvisionState
			}
			if err := CheckDeallocation(d.NodeUuid, d.ProvisionState, target, d.Maintenance, v.Uuid); err != nil {
				return err
			}
			return fmt.Errorf("node %s blocks deallocation in the database but not by CheckDeallocation", d.NodeUuid)
		}
		return nil
	})
	if errors.Is(err, db.ErrRestart) {
		// Still moving after MaxTxAttempts tries: say so instead of a 500.
		return web.Conflict("Allocation is being changed concurrently; try again.")
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// CheckDeallocation says whether the allocation allocUUID may be removed from
// a node in the given state: always in maintenance; otherwise not while the
// node is active or in a transitional state that forbids updates (409 with
// Ironic's messages).
func CheckDeallocation(nodeUUID uuid.UUID, provisionState string, target *string, maintenance bool, allocUUID uuid.UUID) error {
	if maintenance {
		return nil
	}
	if target != nil && *target != "" && !slices.Contains(node.UpdateAllowedStates, provisionState) {
		return web.Conflict("Cannot remove allocation %s for node %s, because the node is in state %s where updates are not allowed (and maintenance mode is off)",
			allocUUID, nodeUUID, provisionState)
	}
	if provisionState == "active" {
		return web.Conflict("Cannot remove allocation %s for node %s, because the node is active (and maintenance mode is off)",
			allocUUID, nodeUUID)
	}
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func subset(want, have []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func dedupe(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
