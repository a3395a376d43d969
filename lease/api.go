package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"slices"
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
	"github.com/metalloc/metalloc/topology"
	"github.com/metalloc/metalloc/trait"
	"github.com/metalloc/metalloc/web"
)

var (
	//go:embed create_schema.json
	createSchemaJSON []byte

	// traits and forbidden_traits are Ironic's TRAITS_SCHEMA.
	createSchema = web.MustSchemaWith("lease", createSchemaJSON, func(doc map[string]any) {
		res := doc["properties"].(map[string]any)["reservations"].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)
		res["traits"].(map[string]any)["items"] = trait.Schema()
		res["forbidden_traits"].(map[string]any)["items"] = trait.Schema()
	})
)

// HandlerOptions configures the lease API.
type HandlerOptions struct {
	// PublicEndpoint is the base URL used in links; empty means the
	// request's scheme and host.
	PublicEndpoint string
	// MaxLimit caps page sizes (api.max_limit).
	MaxLimit int
	// Rules are the access rules: the allocations' (baremetal:allocation:*,
	// with the lease's project_id as allocation.owner).
	Rules auth.Rules
	// Log gets one line per admission, refusal and change (nil: none).
	Log *zap.Logger
	// Now is the clock (nil: time.Now); tests set it.
	Now func() time.Time
	// Store is the lease store to serve from (nil: one of its own). The
	// API passes the one Blazar's handler uses too, so that the process
	// keeps one copy of the pool (pool.go) and reads it once.
	Store *Store
}

// Handler serves /v1/leases (a metalloc extension, not Blazar's API; see
// docs/leases.md and docs/api-compatibility.md).
type Handler struct {
	pool   *pgxpool.Pool
	store  *Store
	opts   HandlerOptions
	policy allocation.Policy
}

// NewHandler returns a Handler on pool.
func NewHandler(pool *pgxpool.Pool, opts HandlerOptions) *Handler {
	if opts.MaxLimit <= 0 {
		opts.MaxLimit = web.DefaultMaxLimit
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	store := opts.Store
	if store == nil {
		store = NewStore(pool)
	}
	return &Handler{pool: pool, store: store, opts: opts, policy: allocation.Policy{Rules: opts.Rules}}
}

// Register adds POST/GET /v1/leases, GET /v1/leases/availability,
// GET/PATCH/DELETE /v1/leases/{uuid or name}, POST
// /v1/leases/{ident}/cancel and the lease calendar GET /v1/ui/leases
// under v1, at every microversion (the routes are metalloc's own).
func (h *Handler) Register(v1 *echo.Group) {
	v1.POST("/leases", h.create)
	v1.GET("/leases", h.list)
	v1.GET("/leases/availability", h.availability)
	v1.GET("/leases/:ident", h.get)
	v1.PATCH("/leases/:ident", h.patch)
	v1.POST("/leases/:ident/cancel", h.cancel)
	v1.DELETE("/leases/:ident", h.delete)
	v1.GET("/ui/leases", h.uiCalendar)
}

func (h *Handler) base(c echo.Context) string { return web.PublicURL(c, h.opts.PublicEndpoint) }

func notFound(ident string) error { return web.NotFound("Lease %s could not be found.", ident) }

// reservationBody is one item of a lease's reservations.
type reservationBody struct {
	ResourceClass   string   `json:"resource_class"`
	Count           int      `json:"count"`
	Traits          []string `json:"traits"`
	ForbiddenTraits []string `json:"forbidden_traits"`
	Required        *string  `json:"required"`
	Preferred       *string  `json:"preferred"`
}

// createRequest is the body of POST /v1/leases.
type createRequest struct {
	UUID         *string           `json:"uuid"`
	Name         *string           `json:"name"`
	ProjectID    *string           `json:"project_id"`
	StartTime    *string           `json:"start_time"`
	EndTime      string            `json:"end_time"`
	OnStart      *string           `json:"on_start"`
	Reservations []reservationBody `json:"reservations"`
}

// parseTime reads an RFC 3339 time ("2025-01-06T09:00:00Z", any offset)
// as UTC, fractions of a second dropped; 400 naming field otherwise.
func parseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return t, web.BadRequest("Invalid %s %q: expected an RFC 3339 time such as 2025-01-06T09:00:00Z", field, s)
	}
	return t.UTC().Truncate(time.Second), nil
}

// reservations turns the bodies into Reservations, checking their levels
// against the topology (400 naming the levels there are).
func (h *Handler) reservations(c echo.Context, bodies []reservationBody) ([]Reservation, error) {
	var levels []topology.Level
	out := make([]Reservation, len(bodies))
	for i, b := range bodies {
		traits := allocation.UniqueTraits(b.Traits)
		slices.Sort(traits)
		forbidden := allocation.UniqueTraits(b.ForbiddenTraits)
		slices.Sort(forbidden)
		for _, t := range traits {
			if slices.Contains(forbidden, t) {
				return nil, web.BadRequest("Invalid reservation %d: trait %s is both required and forbidden", i+1, t)
			}
		}
		r := Reservation{ResourceClass: b.ResourceClass, Count: b.Count, Traits: traits, Forbidden: forbidden,
			Rule: RuleNone, LevelIndex: -1}
		if b.Required != nil {
			r.Rule, r.Level = RuleRequired, *b.Required
		} else if b.Preferred != nil {
			r.Rule, r.Level = RulePreferred, *b.Preferred
		}
		if r.Rule != RuleNone {
			if levels == nil {
				var err error
				if levels, err = topology.Load(c.Request().Context(), h.pool); err != nil {
					return nil, err
				}
			}
			idx, err := topology.LevelIndex(levels, r.Level)
			if err != nil {
				return nil, web.BadRequest("Invalid reservation %d: %v", i+1, err)
			}
			r.LevelIndex, r.Sources = idx, levelSources(levels, idx)
		}
		out[i] = r
	}
	return out, nil
}

func (h *Handler) create(c echo.Context) error {
	ctx := c.Request().Context()
	var body createRequest
	if err := allocation.DecodeBody(c, createSchema, "lease", &body); err != nil {
		return err
	}
	owner := body.ProjectID
	if err := h.policy.AuthorizeCreate(c, &owner); err != nil {
		return err
	}
	if owner == nil {
		if p := auth.Caller(ctx).ProjectID; p != "" {
			owner = &p
		} else {
			return web.BadRequest("Cannot create lease: project_id is required for a caller without a project")
		}
	}
	req := Request{ProjectID: *owner, Name: allocation.NoName(body.Name), OnStart: OnStartAllocate}
	if req.Name != nil && !web.ValidLogicalName(*req.Name, web.RequestVersion(c)) {
		return web.BadRequest("Cannot create lease with invalid name '%s'", *req.Name)
	}
	if body.OnStart != nil {
		req.OnStart = *body.OnStart
	}
	now := h.opts.Now().UTC()
	var err error
	if body.StartTime == nil || *body.StartTime == "now" {
		req.Start = now.Truncate(time.Second).Add(time.Second) // the next whole second
	} else if req.Start, err = parseTime("start_time", *body.StartTime); err != nil {
		return err
	}
	if req.End, err = parseTime("end_time", body.EndTime); err != nil {
		return err
	}
	switch {
	case !req.Start.Before(req.End):
		return web.BadRequest("Invalid lease: start_time %s is not before end_time %s",
			req.Start.Format(timeFormat), req.End.Format(timeFormat))
	case req.Start.Before(now.Add(-time.Minute)):
		return web.BadRequest("Invalid lease: start_time %s is in the past (now is %s)",
			req.Start.Format(timeFormat), now.Truncate(time.Second).Format(timeFormat))
	}
	if req.Reservations, err = h.reservations(c, body.Reservations); err != nil {
		return err
	}
	if body.UUID != nil && *body.UUID != "" {
		if req.UUID, err = uuid.Parse(*body.UUID); err != nil {
			return web.BadRequest("Expected UUID for uuid: %s", *body.UUID)
		}
	} else {
		req.UUID = uuid.New()
	}
	v, err := h.store.Admit(ctx, req, h.opts.Log)
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		return web.Conflict("%s", refused.Error())
	case errors.Is(err, ErrContended):
		return web.Conflict("Lease not admitted: %v, %d times; try again.", err, MaxAdmitAttempts)
	case db.IsUniqueViolation(err, "leases_name_key"):
		return web.Conflict("A lease with name %s already exists.", *req.Name)
	case db.IsUniqueViolation(err, "leases_uuid_key"):
		return web.Conflict("A lease with UUID %s already exists.", req.UUID)
	case err != nil:
		return fmt.Errorf("admitting lease: %w", err)
	}
	c.Response().Header().Set("Location", h.base(c)+"/v1/leases/"+v.Uuid.String())
	return c.JSON(http.StatusCreated, v.Doc(h.base(c)))
}

// find reads lease ident in a write's transaction, locks it and checks
// rule on it for the caller: 404 when unknown or hidden, 403 when rule
// forbids.
func (h *Handler) find(c echo.Context, q *Queries, ident, rule string) (Lease, error) {
	return Lock(c.Request().Context(), q, ident, func(v View) error {
		return h.policy.Check(c, &v.ProjectID, rule, notFound(ident))
	})
}

// Lock reads lease ident (a uuid, else a name) in the transaction of q,
// lets check refuse it (its error is returned: 404 or 403), then locks
// its row (FOR UPDATE) and returns it: web's 404 "Lease ... could not be
// found." when there is none (or it went meanwhile). The lease API and
// Blazar's (lease/blazar) find a lease to change this way.
func Lock(ctx context.Context, q *Queries, ident string, check func(View) error) (Lease, error) {
	v, err := get(ctx, q, ident)
	if errors.Is(err, ErrNotFound) {
		return Lease{}, notFound(ident)
	} else if err != nil {
		return Lease{}, err
	}
	if err := check(v); err != nil {
		return Lease{}, err
	}
	l, err := q.LockLease(ctx, v.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, notFound(ident)
	}
	return l, err
}

// GetIn is Store.Get in the transaction of q.
func GetIn(ctx context.Context, q *Queries, ident string) (View, error) { return get(ctx, q, ident) }

// Visible reads lease ident (a uuid, else a name) for a GET by the caller
// of c: hidden, the API's 404, when there is none or policy hides it from
// the caller (allocation.Policy.Check). The lease API's GET and Blazar's
// (lease/blazar).
func (s *Store) Visible(c echo.Context, policy allocation.Policy, ident string, hidden error) (View, error) {
	v, err := s.Get(c.Request().Context(), ident)
	if errors.Is(err, ErrNotFound) {
		return v, hidden
	} else if err != nil {
		return v, err
	}
	return v, policy.Check(c, &v.ProjectID, "", hidden)
}

func (h *Handler) get(c echo.Context) error {
	ident := c.Param("ident")
	v, err := h.store.Visible(c, h.policy, ident, notFound(ident))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v.Doc(h.base(c)))
}

// list is GET /v1/leases: a page in creation order, filtered by state
// and project_id (web.ListInOrder).
func (h *Handler) list(c echo.Context) error {
	return web.ListInOrder(c, web.InOrder[View]{Name: "leases", Title: "Leases",
		Filters: []string{"state", "project_id"}, Owner: "project_id", Scope: h.policy.ListScope,
		Get: h.store.Get, ErrNotFound: ErrNotFound, NotFound: notFound,
		List: func(ctx context.Context, f map[string]*string, after int64, limit int) ([]View, error) {
			return h.store.List(ctx, ListFilter{State: f["state"], ProjectID: f["project_id"]}, after, limit)
		},
		Key: func(v View) (int64, uuid.UUID) { return v.ID, v.Uuid }, Doc: View.Doc,
	}, h.base(c), h.opts.MaxLimit)
}

// patch applies a JSON patch to name and end_time. A new end_time is
// admitted like a new lease: the lease and its nodes' rows change in one
// transaction, and an extension over a window another lease holds on one
// of its nodes is 409 naming the node and that lease (the exclusion
// constraint decides; a concurrent booking makes the transaction start
// over). Only a pending or active lease's end moves, never to or before
// its start or now.
func (h *Handler) patch(c echo.Context) error {
	ctx := c.Request().Context()
	body, err := allocation.ReadPatchBody(c)
	if err != nil {
		return err
	}
	_, patch, err := allocation.ReadPatch(body, "name", "end_time")
	if err != nil {
		return err
	}
	ident := c.Param("ident")
	var result View
	err = db.InTx(ctx, h.pool, func(tx pgx.Tx) error {
		q := New(tx)
		l, err := h.find(c, q, ident, allocation.RuleUpdate)
		if err != nil {
			return err
		}
		doc := map[string]any{"name": l.Name, "end_time": l.EndTime.UTC().Format(timeFormat)}
		var out struct {
			Name    *string `json:"name"`
			EndTime *string `json:"end_time"`
		}
		if err := allocation.ApplyPatch(patch, doc, &out); err != nil {
			return err
		}
		out.Name = allocation.NoName(out.Name)
		if out.Name != nil && !web.ValidLogicalName(*out.Name, web.RequestVersion(c)) {
			return web.BadRequest("Cannot update lease with invalid name '%s'", *out.Name)
		}
		if err := q.SetLeaseName(ctx, SetLeaseNameParams{ID: l.ID, Name: out.Name}); db.IsUniqueViolation(err, "leases_name_key") {
			return web.Conflict("A lease with name %s already exists.", *out.Name)
		} else if err != nil {
			return err
		}
		if out.EndTime == nil {
			return web.BadRequest("Cannot remove end_time from a lease")
		}
		end, err := parseTime("end_time", *out.EndTime)
		if err != nil {
			return err
		}
		if !end.Equal(l.EndTime) {
			if err := MoveEnd(ctx, q, l, end, h.opts.Now().UTC(), h.opts.Log); err != nil {
				return err
			}
		}
		result, err = get(ctx, q, l.Uuid.String())
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, result.Doc(h.base(c)))
}

// MoveEnd sets lease l's end_time to end with its blocking rows, in the
// transaction of q (l locked by Lock), at time now: 409 unless l is
// pending or active; 400 for an end not after the start or not after
// now; an extension over a window another lease holds on one of its nodes
// is 409 naming the node and that lease; a booking committed meanwhile
// (the exclusion constraint) is db.ErrRestart, for db.InTx to start the
// transaction over. The lease API's PATCH of end_time and Blazar's PUT of
// end_date (lease/blazar).
func MoveEnd(ctx context.Context, q *Queries, l Lease, end, now time.Time, log *zap.Logger) error {
	switch {
	case l.State != StatePending && l.State != StateActive:
		return web.Conflict("Lease %s is %s: only a pending or active lease's end_time can change", l.Uuid, l.State)
	case !end.After(l.StartTime):
		return web.BadRequest("Invalid end_time %s: not after the lease's start_time %s",
			end.Format(timeFormat), l.StartTime.UTC().Format(timeFormat))
	case !end.After(now):
		return web.BadRequest("Invalid end_time %s: not in the future (now is %s); cancel the lease instead",
			end.Format(timeFormat), now.Truncate(time.Second).Format(timeFormat))
	}
	if end.After(l.EndTime) {
		cs, err := q.EndConflicts(ctx, EndConflictsParams{ID: l.ID, EndTime: end})
		if err != nil {
			return err
		}
		if len(cs) > 0 {
			var names []string
			for _, x := range cs {
				n := x.NodeUuid.String()
				if x.NodeName != nil {
					n = *x.NodeName
				}
				names = append(names, fmt.Sprintf("node %s is booked by lease %s from %s", n, x.LeaseUuid,
					x.BusyFrom.UTC().Format(timeFormat)))
			}
			if len(names) > 5 {
				names = append(names[:5], fmt.Sprintf("and %d more", len(cs)-5))
			}
			return web.Conflict("Cannot extend lease %s to %s: %s.", l.Uuid, end.Format(timeFormat), strings.Join(names, "; "))
		}
	}
	booked, err := q.BookedNodes(ctx, l.ID)
	if err != nil {
		return err
	}
	ids := make([]int64, len(booked))
	for i, b := range booked {
		ids[i] = b.NodeID
	}
	if err := lockForBooking(ctx, q, ids); err != nil {
		return err
	}
	err = q.SetLeaseEnd(ctx, SetLeaseEndParams{ID: l.ID, EndTime: end})
	if db.IsExclusionViolation(err, "lease_nodes_no_overlap") {
		return db.ErrRestart // booked after EndConflicts read: read again
	}
	if err == nil {
		log.Info("lease end moved", zap.Stringer("lease", l.Uuid), zap.Time("from", l.EndTime), zap.Time("to", end))
	}
	return err
}

// cancel is POST /v1/leases/{ident}/cancel: a pending lease (or one in
// error) becomes cancelled and its nodes stop blocking; its rows stay,
// released, so that it still shows which nodes it had. An action rather
// than a PATCH of state: the other moves of state are the conductors',
// and an action says what happens (as Ironic's provision actions). An
// active lease is ended by moving its end_time (a conductor ends it, a
// later part of issue 43): 409.
func (h *Handler) cancel(c echo.Context) error {
	ctx := c.Request().Context()
	ident := c.Param("ident")
	var result View
	err := db.InTx(ctx, h.pool, func(tx pgx.Tx) error {
		q := New(tx)
		l, err := h.find(c, q, ident, allocation.RuleUpdate)
		if err != nil {
			return err
		}
		if l.State != StatePending && l.State != StateError {
			return web.Conflict("Lease %s is %s: only a pending lease or one in error can be cancelled", l.Uuid, l.State)
		}
		reason := "cancelled by " + callerName(c)
		if err := q.CancelLease(ctx, CancelLeaseParams{ID: l.ID, Reason: &reason}); err != nil {
			return err
		}
		result, err = get(ctx, q, l.Uuid.String())
		return err
	})
	if err != nil {
		return err
	}
	h.opts.Log.Info("lease cancelled", zap.Stringer("lease", result.Uuid))
	return c.JSON(http.StatusOK, result.Doc(h.base(c)))
}

// callerName names the request's caller for a status_reason: its user,
// else its project, else "the API".
func callerName(c echo.Context) string {
	creds := auth.Caller(c.Request().Context())
	switch {
	case creds.UserName != "":
		return creds.UserName
	case creds.UserID != "":
		return creds.UserID
	case creds.ProjectID != "":
		return "project " + creds.ProjectID
	}
	return "the API"
}

// delete deletes a lease that is not active, with its reservations and
// rows (its nodes stop blocking at once); 409 for an active lease (end it
// first: its nodes are in use).
func (h *Handler) delete(c echo.Context) error {
	ctx := c.Request().Context()
	ident := c.Param("ident")
	var gone uuid.UUID
	err := db.InTx(ctx, h.pool, func(tx pgx.Tx) error {
		q := New(tx)
		l, err := h.find(c, q, ident, allocation.RuleDelete)
		if err != nil {
			return err
		}
		if l.State == StateActive {
			return web.Conflict("Lease %s is active: its nodes are in use until it ends; move its end_time to end it", l.Uuid)
		}
		gone = l.Uuid
		return q.DeleteLease(ctx, l.ID)
	})
	if err != nil {
		return err
	}
	h.opts.Log.Info("lease deleted", zap.Stringer("lease", gone))
	return c.NoContent(http.StatusNoContent)
}
