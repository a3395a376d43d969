package allocgroup

import (
	"context"
	_ "embed"
	"encoding/json"
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

	// traits are Ironic's TRAITS_SCHEMA.
	createSchema = web.MustSchemaWith("allocation_group", createSchemaJSON, func(doc map[string]any) {
		doc["properties"].(map[string]any)["traits"].(map[string]any)["items"] = trait.Schema()
	})
)

// HandlerOptions configures the allocation group API.
type HandlerOptions struct {
	// PublicEndpoint is the base URL used in links; empty means the
	// request's scheme and host.
	PublicEndpoint string
	// MaxLimit caps page sizes (api.max_limit).
	MaxLimit int
	// Rules are the access rules: the allocations' (baremetal:allocation:*,
	// with the group's owner as allocation.owner).
	Rules auth.Rules
	// Hub, when set, enables Prefer: wait on POST and GET.
	Hub *allocation.Hub
	// MaxWait caps Prefer: wait (api.max_wait).
	MaxWait time.Duration
	// RequestTimeout bounds each database read of a wait (api.request_timeout).
	RequestTimeout time.Duration
}

// Handler serves /v1/allocation_groups (a metalloc extension; see
// docs/api-compatibility.md).
type Handler struct {
	pool   *pgxpool.Pool
	store  *Store
	allocs *allocation.Store
	opts   HandlerOptions
	policy allocation.Policy
}

// NewHandler returns a Handler on pool.
func NewHandler(pool *pgxpool.Pool, opts HandlerOptions) *Handler {
	if opts.MaxLimit <= 0 {
		opts.MaxLimit = web.DefaultMaxLimit
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = allocation.DefaultMaxWait
	}
	return &Handler{pool: pool, store: NewStore(pool), allocs: allocation.NewStore(pool), opts: opts,
		policy: allocation.Policy{Rules: opts.Rules}}
}

// Register adds POST/GET /v1/allocation_groups and GET/PATCH/DELETE
// /v1/allocation_groups/{ident} under v1, from microversion 1.52 (as
// allocations: 404 for GET, 405 otherwise below it).
func (h *Handler) Register(v1 *echo.Group) {
	gate := web.GateResource(52, "allocation groups")
	v1.POST("/allocation_groups", gate(h.create))
	v1.GET("/allocation_groups", gate(h.list))
	v1.GET("/allocation_groups/:ident", gate(h.get))
	v1.PATCH("/allocation_groups/:ident", gate(h.patch))
	v1.DELETE("/allocation_groups/:ident", gate(h.delete))
}

// LongRequest reports whether r is POST /v1/allocation_groups or GET
// /v1/allocation_groups/{ident} with Prefer: wait: metalloc-api does not
// apply its whole-request timeout to those (see allocation.LongRequest).
func LongRequest(r *http.Request) bool {
	p := r.URL.Path
	const prefix = "/v1/allocation_groups"
	if !(r.Method == http.MethodPost && p == prefix) &&
		!(r.Method == http.MethodGet && strings.HasPrefix(p, prefix+"/") && !strings.Contains(p[len(prefix)+1:], "/")) {
		return false
	}
	_, ok := web.PreferWait(r.Header)
	return ok
}

func (h *Handler) base(c echo.Context) string { return web.PublicURL(c, h.opts.PublicEndpoint) }

func notFound(ident string) error {
	return web.NotFound("Allocation group %s could not be found.", ident)
}

// createRequest is the body of POST /v1/allocation_groups.
type createRequest struct {
	UUID           *string        `json:"uuid"`
	Name           *string        `json:"name"`
	Count          int32          `json:"count"`
	ResourceClass  string         `json:"resource_class"`
	Traits         []string       `json:"traits"`
	CandidateNodes []string       `json:"candidate_nodes"`
	Owner          *string        `json:"owner"`
	Extra          map[string]any `json:"extra"`
	Required       *string        `json:"required"`
	Preferred      *string        `json:"preferred"`
}

func (h *Handler) create(c echo.Context) error {
	ctx := c.Request().Context()
	ver := web.RequestVersion(c)
	var req createRequest
	if err := allocation.DecodeBody(c, createSchema, "allocation group", &req); err != nil {
		return err
	}
	if err := h.policy.AuthorizeCreate(c, &req.Owner); err != nil {
		return err
	}
	req.Name = allocation.NoName(req.Name)
	if req.Name != nil && !web.ValidLogicalName(*req.Name, ver) {
		return web.BadRequest("Cannot create allocation group with invalid name '%s'", *req.Name)
	}
	traits := allocation.UniqueTraits(req.Traits)
	slices.Sort(traits)
	extra, err := allocation.ExtraJSON(req.Extra)
	if err != nil {
		return err
	}
	p := CreateGroupParams{Name: req.Name, Count: req.Count, ResourceClass: req.ResourceClass, Traits: traits,
		Owner: req.Owner, Rule: RuleNone, Extra: extra}
	if req.Required != nil {
		p.Rule, p.RuleLevel = RuleRequired, req.Required
	} else if req.Preferred != nil {
		p.Rule, p.RuleLevel = RulePreferred, req.Preferred
	}
	if p.RuleLevel != nil {
		levels, err := topology.Load(ctx, h.pool)
		if err != nil {
			return err
		}
		if _, err := topology.LevelIndex(levels, *p.RuleLevel); err != nil {
			return web.BadRequest("Cannot create allocation group: %v", err)
		}
	}
	if len(req.CandidateNodes) > 0 {
		if p.CandidateNodes, err = h.allocs.ResolveCandidates(ctx, req.CandidateNodes, h.policy.CandidateScope(c)); err != nil {
			return err
		}
	}
	if req.UUID != nil && *req.UUID != "" {
		if p.Uuid, err = uuid.Parse(*req.UUID); err != nil {
			return web.BadRequest("Expected UUID for uuid: %s", *req.UUID)
		}
	} else {
		p.Uuid = uuid.New()
	}
	wait, waiting := h.preferWait(c)
	var w *allocation.Waiter
	if waiting {
		w = h.opts.Hub.Watch(p.Uuid) // before the row exists: no change is missed
		defer w.Close()
	}
	g, err := h.store.q.CreateGroup(ctx, p)
	switch {
	case db.IsUniqueViolation(err, "allocation_groups_name_key"):
		return web.Conflict("An allocation group with name %s already exists.", *p.Name)
	case db.IsUniqueViolation(err, "allocation_groups_uuid_key"):
		return web.Conflict("An allocation group with UUID %s already exists.", p.Uuid)
	case err != nil:
		return fmt.Errorf("creating allocation group: %w", err)
	}
	v := View{AllocationGroup: g}
	c.Response().Header().Set("Location", h.base(c)+"/v1/allocation_groups/"+g.Uuid.String())
	if waiting {
		allocation.PreferenceApplied(c, wait, h.opts.RequestTimeout)
		if nv, err := h.await(c, v, w, wait); err == nil {
			v = nv
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return c.JSON(http.StatusCreated, v.Doc(h.base(c)))
}

// preferWait is the wait asked for, capped by MaxWait; false without a Hub.
func (h *Handler) preferWait(c echo.Context) (time.Duration, bool) {
	return allocation.PreferredWait(c.Request().Header, h.opts.Hub, h.opts.MaxWait)
}

// find reads group ident in a write's transaction and checks rule on it
// for the caller: 404 when unknown or hidden, 403 when rule forbids.
func (h *Handler) find(c echo.Context, q *Queries, ident, rule string) (View, error) {
	v, err := get(c.Request().Context(), q, ident)
	if errors.Is(err, ErrNotFound) {
		return v, notFound(ident)
	} else if err != nil {
		return v, err
	}
	return v, h.policy.Check(c, v.Owner, rule, notFound(ident))
}

// read reads group ident for the caller (404 when unknown or hidden), each
// read bounded by RequestTimeout during a wait.
func (h *Handler) read(c echo.Context, ident string) (View, error) {
	ctx := c.Request().Context()
	if h.opts.RequestTimeout > 0 && LongRequest(c.Request()) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.opts.RequestTimeout)
		defer cancel()
	}
	v, err := h.store.Get(ctx, ident)
	if errors.Is(err, ErrNotFound) {
		return v, notFound(ident)
	} else if err != nil {
		return v, err
	}
	return v, h.policy.Check(c, v.Owner, "", notFound(ident))
}

// await waits until group v leaves allocating (w watches it), for at most
// wait, and returns it as it is then; ErrNotFound if it was deleted.
func (h *Handler) await(c echo.Context, v View, w *allocation.Waiter, wait time.Duration) (View, error) {
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	ident := v.Uuid.String()
	for v.State == StateAllocating {
		select {
		case <-w.C:
		case <-timeout.C:
			return h.reread(c, ident, v)
		case <-h.opts.Hub.Stopping():
			return h.reread(c, ident, v)
		case <-c.Request().Context().Done():
			return v, c.Request().Context().Err()
		}
		var err error
		if v, err = h.reread(c, ident, v); err != nil {
			return v, err
		}
	}
	return v, nil
}

func (h *Handler) reread(c echo.Context, ident string, old View) (View, error) {
	v, err := h.read(c, ident)
	var apiErr *web.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		return old, ErrNotFound
	}
	return v, err
}

func (h *Handler) get(c echo.Context) error {
	ident := c.Param("ident")
	wait, waiting := h.preferWait(c)
	var w *allocation.Waiter
	if u, ok := web.UUIDLike(ident); ok && waiting {
		w = h.opts.Hub.Watch(u) // before the read: no change is missed
		defer w.Close()
	}
	v, err := h.read(c, ident)
	if err != nil {
		return err
	}
	if waiting {
		if w == nil {
			w = h.opts.Hub.Watch(v.Uuid)
			defer w.Close()
			if v, err = h.read(c, ident); err != nil {
				return err
			}
		}
		allocation.PreferenceApplied(c, wait, h.opts.RequestTimeout)
		if v, err = h.await(c, v, w, wait); errors.Is(err, ErrNotFound) {
			return notFound(ident)
		} else if err != nil {
			return err
		}
	}
	return c.JSON(http.StatusOK, v.Doc(h.base(c)))
}

// list is GET /v1/allocation_groups: a page in creation order, filtered
// by state, resource_class and owner (web.ListInOrder).
func (h *Handler) list(c echo.Context) error {
	return web.ListInOrder(c, web.InOrder[View]{Name: "allocation_groups", Title: "Allocation groups",
		Filters: []string{"state", "resource_class", "owner"}, Owner: "owner", Scope: h.policy.ListScope,
		Get: h.store.Get, ErrNotFound: ErrNotFound, NotFound: notFound,
		List: func(ctx context.Context, f map[string]*string, after int64, limit int) ([]View, error) {
			return h.store.List(ctx, ListFilter{State: f["state"], ResourceClass: f["resource_class"], Owner: f["owner"]},
				after, limit)
		},
		Key: func(v View) (int64, uuid.UUID) { return v.ID, v.Uuid }, Doc: View.Doc,
	}, h.base(c), h.opts.MaxLimit)
}

// patch applies a JSON patch to name, extra and count. count may only go
// up, on an active group: the group goes back to allocating and a
// conductor adds the members under its rule (in its domain for required);
// if they do not fit it returns to active with its old count and a
// last_error. A member is released with DELETE /v1/allocations/{member},
// which lowers the count.
func (h *Handler) patch(c echo.Context) error {
	ctx := c.Request().Context()
	body, err := allocation.ReadPatchBody(c)
	if err != nil {
		return err
	}
	_, patch, err := allocation.ReadPatch(body, "name", "extra", "count")
	if err != nil {
		return err
	}
	ident := c.Param("ident")
	var result View
	err = db.InTx(ctx, h.pool, func(tx pgx.Tx) error {
		q := New(tx)
		v, err := h.find(c, q, ident, allocation.RuleUpdate)
		if err != nil {
			return err
		}
		g, err := q.LockGroup(ctx, v.ID)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound(ident)
		} else if err != nil {
			return err
		}
		doc := map[string]any{"name": g.Name, "extra": json.RawMessage(g.Extra), "count": g.Count}
		var out struct {
			Name  *string        `json:"name"`
			Extra map[string]any `json:"extra"`
			Count *int32         `json:"count"`
		}
		if err := allocation.ApplyPatch(patch, doc, &out); err != nil {
			return err
		}
		out.Name = allocation.NoName(out.Name)
		if out.Name != nil && !web.ValidLogicalName(*out.Name, web.RequestVersion(c)) {
			return web.BadRequest("Cannot update allocation group with invalid name '%s'", *out.Name)
		}
		extra, err := allocation.ExtraJSON(out.Extra)
		if err != nil {
			return err
		}
		err = q.UpdateGroupNameExtra(ctx, UpdateGroupNameExtraParams{ID: g.ID, Name: out.Name, Extra: extra})
		if db.IsUniqueViolation(err, "allocation_groups_name_key") {
			return web.Conflict("An allocation group with name %s already exists.", *out.Name)
		} else if err != nil {
			return err
		}
		switch {
		case out.Count == nil:
			return web.BadRequest("Cannot remove count from an allocation group")
		case *out.Count < g.Count:
			return web.BadRequest("The count of an allocation group can only grow (from %d): release a member with DELETE /v1/allocations/{member}", g.Count)
		case *out.Count > g.Count && g.State != StateActive:
			return web.Conflict("Allocation group %s is %s: only an active group can grow", g.Uuid, g.State)
		case *out.Count > g.Count:
			if _, err := q.GrowGroup(ctx, GrowGroupParams{ID: g.ID, Count: *out.Count}); err != nil {
				return err
			}
		}
		result, err = get(ctx, q, g.Uuid.String())
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, result.Doc(h.base(c)))
}

// delete releases every member and deletes the group in one transaction,
// in the lock order: the members' nodes (in id order), their allocation
// rows, then the group. Nodes come from an unlocked read: if the members
// changed meanwhile (a conductor added some), the transaction starts over.
// 409 when a member's node is deployed or mid-operation (as DELETE
// /v1/allocations/{ident}).
func (h *Handler) delete(c echo.Context) error {
	ctx := c.Request().Context()
	ident := c.Param("ident")
	err := db.InTx(ctx, h.pool, func(tx pgx.Tx) error {
		q := New(tx)
		v, err := h.find(c, q, ident, allocation.RuleDelete)
		if err != nil {
			return err
		}
		nodeIDs, err := q.MemberNodes(ctx, &v.ID)
		if err != nil {
			return err
		}
		nodes, err := q.LockNodes(ctx, nodeIDs)
		if err != nil {
			return err
		}
		members, err := q.LockMembers(ctx, &v.ID)
		if err != nil {
			return err
		}
		if _, err := q.LockGroup(ctx, v.ID); errors.Is(err, pgx.ErrNoRows) {
			return notFound(ident)
		} else if err != nil {
			return err
		}
		// Under the group lock no member can be added: compare with what
		// was locked.
		cnt, err := q.GroupMemberCount(ctx, v.ID)
		if err != nil {
			return err
		}
		if len(nodes) != len(nodeIDs) || len(members) != len(nodeIDs) || int(cnt.Members) != len(members) {
			return db.ErrRestart
		}
		ids := make([]int64, len(members))
		for i, m := range members {
			if m.NodeID == nil || !slices.Contains(nodeIDs, *m.NodeID) {
				return db.ErrRestart
			}
			ids[i] = m.ID
			n := nodes[slices.IndexFunc(nodes, func(n LockNodesRow) bool { return n.ID == *m.NodeID })]
			if err := allocation.CheckDeallocation(n.Uuid, n.ProvisionState, n.TargetProvisionState, n.Maintenance, m.Uuid); err != nil {
				return err
			}
		}
		if err := q.DeallocateMembers(ctx, ids); err != nil {
			return err
		}
		return q.DeleteGroup(ctx, v.ID)
	})
	if errors.Is(err, db.ErrRestart) {
		return web.Conflict("Allocation group is being changed concurrently; try again.")
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
