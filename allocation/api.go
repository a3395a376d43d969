package allocation

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
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

	createSchema = web.MustSchema("allocation", createSchemaJSON)
	patchSchema  = web.MustSchema("patch", patchSchemaJSON)
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
}

// Handler serves the allocation endpoints of the Ironic API.
type Handler struct {
	store *Store
	opts  HandlerOptions
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
	return &Handler{store: store, opts: opts}
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
	gate := h.requireAllocations
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

// requireAllocations hides the endpoints below 1.52, as Ironic does: 404 for
// GET, 405 otherwise.
func (h *Handler) requireAllocations(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !web.RequestVersion(c).AtLeast(1, 52) {
			status := http.StatusMethodNotAllowed
			if c.Request().Method == http.MethodGet {
				status = http.StatusNotFound
			}
			return web.Errorf(status, "The API version does not allow allocations")
		}
		return next(c)
	}
}

func (h *Handler) base(c echo.Context) string { return web.PublicURL(c, h.opts.PublicEndpoint) }

// createRequest is the body of POST /v1/allocations.
type createRequest struct {
	UUID           *string        `json:"uuid"`
	Name           *string        `json:"name"`
	ResourceClass  *string        `json:"resource_class"`
	Traits         []string       `json:"traits"`
	CandidateNodes []string       `json:"candidate_nodes"`
	Extra          map[string]any `json:"extra"`
	Owner          *string        `json:"owner"`
	Node           *string        `json:"node"`
}

func (h *Handler) create(c echo.Context) error {
	ctx := c.Request().Context()
	ver := web.RequestVersion(c)
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return web.BadRequest("Could not read the request body: %v", err)
	}
	if _, err := createSchema.Decode(body); err != nil {
		return err
	}
	var req createRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return web.BadRequest("Invalid allocation: %v", err)
	}
	if req.Owner != nil && !ver.AtLeast(1, 60) {
		return web.Errorf(http.StatusNotAcceptable, "Request not acceptable.")
	}
	if err := h.authorizeCreate(c, &req); err != nil {
		return err
	}
	if req.Name != nil && *req.Name != "" && !web.ValidLogicalName(*req.Name, ver) {
		return web.BadRequest("Cannot create allocation with invalid name '%s'", *req.Name)
	}
	if req.Name != nil && *req.Name == "" {
		req.Name = nil
	}
	for _, t := range req.Traits {
		if !trait.Valid(t) {
			return web.BadRequest("Schema error for allocation: '%s' is not a valid trait: use a standard trait or one matching ^CUSTOM_[A-Z0-9_]+$", t)
		}
	}
	params := CreateAllocationParams{
		Name:   req.Name,
		Owner:  req.Owner,
		State:  StateAllocating,
		Traits: dedupe(req.Traits),
		Extra:  jsonOrEmpty(req.Extra),
	}
	if req.UUID != nil && *req.UUID != "" {
		u, err := uuid.Parse(*req.UUID)
		if err != nil {
			return web.BadRequest("Expected UUID for uuid: %s", *req.UUID)
		}
		params.Uuid = u
	}

	var node *LockNodeRow
	var row CreateAllocationRow
	backfill := req.Node != nil && *req.Node != ""
	wait, waiting := h.preferWait(c)
	var w *Waiter
	if waiting && !backfill {
		// Watch before the row exists: its activation cannot be missed,
		// and the wait needs no read of its own.
		if params.Uuid == uuid.Nil {
			params.Uuid = uuid.New()
		}
		w = h.opts.Hub.Watch(params.Uuid)
		defer w.Close()
		ctx = h.boundRequest(c)
	}
	create := func(q *Queries) error {
		if backfill {
			if !ver.AtLeast(1, 58) {
				return web.BadRequest("Cannot set node when creating an allocation in this API version")
			}
			id, err := nodeID(ctx, q, *req.Node)
			if err != nil {
				return err
			}
			if err := h.checkNodeVisible(c, q, id, *req.Node); err != nil {
				return web.BadRequest("Node %s could not be found.", *req.Node)
			}
			n, err := q.LockNode(ctx, id)
			if errors.Is(err, pgx.ErrNoRows) { // deleted since it was looked up
				return web.BadRequest("Node %s could not be found.", *req.Node)
			} else if err != nil {
				return fmt.Errorf("locking node: %w", err)
			}
			node = &n
		}
		if req.ResourceClass == nil || *req.ResourceClass == "" {
			if node == nil || node.ResourceClass == nil {
				return web.BadRequest("The resource_class field is mandatory when not backfilling")
			}
			req.ResourceClass = node.ResourceClass
		}
		params.ResourceClass = *req.ResourceClass
		if len(req.CandidateNodes) > 0 {
			uuids, err := resolveCandidates(ctx, q, req.CandidateNodes)
			if err != nil {
				return err
			}
			params.CandidateNodes = uuids
		}
		if params.Uuid == uuid.Nil {
			if node != nil && node.InstanceUuid != nil {
				params.Uuid = *node.InstanceUuid
			} else {
				params.Uuid = uuid.New()
			}
		}
		if node != nil {
			return h.backfill(c, q, node, &params, &row)
		}
		var err error
		row, err = h.store.Insert(ctx, params)
		return err
	}
	if backfill {
		// The node is locked and written with the allocation: one transaction.
		err = db.InTx(ctx, h.store.pool, func(tx pgx.Tx) error { return create(New(tx)) })
	} else {
		// One statement inserts the row and its traits atomically.
		err = create(h.store.q)
	}
	if err != nil {
		return err
	}
	v := View{Allocation: Allocation(row), Traits: params.Traits}
	if node != nil {
		v.NodeUUID = &node.Uuid
	}
	slices.Sort(v.Traits)
	if h.opts.Created != nil {
		h.opts.Created.Inc()
	}
	c.Response().Header().Set("Location", h.base(c)+"/v1/allocations/"+v.Uuid.String())
	if waiting {
		h.unboundRequest(c)
		h.applied(c, wait)
		if v, err = h.await(c, v, v.Uuid.String(), w, wait); err != nil {
			if !errors.Is(err, errGone) && web.ClientGone(c) {
				return err
			}
			// Deleted while we waited, or its state could not be read (the
			// database went away): the row is committed, so the 201 stands,
			// with the allocation as it was created (a 503 would make the
			// client retry and hold two nodes).
			return c.JSON(http.StatusCreated, View{Allocation: Allocation(row), Traits: params.Traits}.Doc(h.base(c), ver))
		}
	}
	return c.JSON(http.StatusCreated, v.Doc(h.base(c), ver))
}

// backfill records the locked, already-deployed node as holding a new active
// allocation (Ironic 1.58). Any mismatch is a 400 and nothing is written.
func (h *Handler) backfill(c echo.Context, q *Queries, node *LockNodeRow, p *CreateAllocationParams, row *CreateAllocationRow) error {
	ctx := c.Request().Context()
	var problems []string
	if node.ProvisionState != "active" {
		problems = append(problems, fmt.Sprintf("Node must be in the \"active\" state, but the current state is \"%s\"", node.ProvisionState))
	}
	if node.ResourceClass == nil || *node.ResourceClass != p.ResourceClass {
		problems = append(problems, fmt.Sprintf("Resource class %s does not match the requested resource class %s",
			deref(node.ResourceClass), p.ResourceClass))
	}
	if len(p.Traits) > 0 {
		have, err := q.NodeTraits(ctx, node.ID)
		if err != nil {
			return err
		}
		if !subset(p.Traits, have) {
			problems = append(problems, fmt.Sprintf("List of traits %v does not match the requested traits %v", have, p.Traits))
		}
	}
	if len(p.CandidateNodes) > 0 && !slices.Contains(p.CandidateNodes, node.Uuid) {
		problems = append(problems, fmt.Sprintf("Candidate nodes must be empty or contain the target node, but got %v", p.CandidateNodes))
	}
	if len(problems) > 0 {
		return web.BadRequest("Cannot backfill an allocation for node %s: %s", node.Uuid, strings.Join(problems, "; "))
	}
	if node.AllocationID != nil || (node.InstanceUuid != nil && *node.InstanceUuid != p.Uuid) {
		inst := "another allocation"
		if node.InstanceUuid != nil {
			inst = node.InstanceUuid.String()
		}
		return web.Conflict("Node %s is associated with instance %s.", node.Uuid, inst)
	}
	p.State, p.NodeID = StateActive, &node.ID
	r, err := insertAllocation(ctx, q, *p, &node.Uuid)
	if err != nil {
		return err
	}
	*row = r
	err = q.BackfillNode(ctx, BackfillNodeParams{NodeID: node.ID, AllocationID: r.ID, InstanceUuid: r.Uuid, Traits: p.Traits})
	if db.IsUniqueViolation(err, "nodes_instance_uuid_key") {
		return web.Conflict("Instance %s is already associated with a node, it cannot be associated with this other node %s", r.Uuid, node.Uuid)
	}
	return err
}

func createError(err error, p CreateAllocationParams) error {
	switch {
	case err == nil:
		return nil
	case db.IsUniqueViolation(err, "allocations_name_key"):
		return web.Conflict("An allocation with name %s already exists.", deref(p.Name))
	case db.IsUniqueViolation(err, "allocations_uuid_key"):
		return web.Conflict("An allocation with UUID %s already exists.", p.Uuid)
	}
	return fmt.Errorf("creating allocation: %w", err)
}

// nodeID resolves a node uuid or name to its id; unknown is Ironic's 400.
func nodeID(ctx context.Context, q *Queries, ident string) (int64, error) {
	var id int64
	var err error
	if u, ok := web.UUIDLike(ident); ok {
		id, err = q.NodeIDByUUID(ctx, u)
	} else {
		id, err = q.NodeIDByName(ctx, &ident)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, web.BadRequest("Node %s could not be found.", ident)
	}
	return id, err
}

// ResolveCandidates maps candidate node names and uuids to node uuids, in
// order, without duplicates; any unknown one is a 400 naming all of them
// (Ironic's check_node_list), as for POST /v1/allocations.
func (s *Store) ResolveCandidates(ctx context.Context, idents []string) ([]uuid.UUID, error) {
	return resolveCandidates(ctx, s.q, idents)
}

// resolveNodes maps candidate node names/uuids to uuids, in order; any
// unknown ident is a 400 naming all of them (Ironic: check_node_list).
func resolveCandidates(ctx context.Context, q *Queries, idents []string) ([]uuid.UUID, error) {
	var uuids []uuid.UUID
	var names []string
	for _, id := range idents {
		if u, ok := web.UUIDLike(id); ok {
			uuids = append(uuids, u)
		} else {
			names = append(names, id)
		}
	}
	rows, err := q.ResolveNodes(ctx, ResolveNodesParams{Uuids: uuids, Names: names})
	if err != nil {
		return nil, err
	}
	byIdent := map[string]uuid.UUID{}
	for _, r := range rows {
		byIdent[r.Uuid.String()] = r.Uuid
		if r.Name != nil {
			byIdent[*r.Name] = r.Uuid
		}
	}
	var out []uuid.UUID
	var missing []string
	for _, id := range idents {
		key := id
		if u, ok := web.UUIDLike(id); ok {
			key = u.String()
		}
		u, ok := byIdent[key]
		if !ok {
			missing = append(missing, id)
			continue
		}
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	if len(missing) > 0 {
		return nil, web.BadRequest("Nodes cannot be found: %s", strings.Join(missing, ", "))
	}
	return out, nil
}

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

func (h *Handler) lookup(c echo.Context, ident string) (View, error) {
	ctx, cancel := h.readContext(c)
	defer cancel()
	v, err := h.store.Get(ctx, ident)
	if errors.Is(err, ErrNotFound) {
		return v, web.NotFound("Allocation %s could not be found.", ident)
	}
	return v, err
}

func (h *Handler) get(c echo.Context) error {
	ver := web.RequestVersion(c)
	fields, err := web.ParseFields(c)
	if err != nil {
		return err
	}
	if err := h.checkFields(fields, ver); err != nil {
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
	}
	return c.JSON(http.StatusOK, web.Project(v.Doc(h.base(c), ver), fields))
}

func (h *Handler) getForNode(c echo.Context) error {
	ctx := c.Request().Context()
	ver := web.RequestVersion(c)
	fields, err := web.ParseFields(c)
	if err != nil {
		return err
	}
	if err := h.checkFields(fields, ver); err != nil {
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
	return c.JSON(http.StatusOK, web.Project(views[0].Doc(h.base(c), ver), fields))
}

func (h *Handler) patch(c echo.Context) error {
	ctx := c.Request().Context()
	ver := web.RequestVersion(c)
	// Ironic's order: the patch document, the version, the identifier.
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return web.BadRequest("Could not read the request body: %v", err)
	}
	if _, err := patchSchema.Decode(body); err != nil {
		return err
	}
	if !ver.AtLeast(1, 57) {
		return web.Errorf(http.StatusMethodNotAllowed, "The API version does not allow updating allocations")
	}
	if err := validIdent(c, "Expected a logical name or UUID but received %s."); err != nil {
		return err
	}
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(body, &ops); err != nil {
		return web.BadRequest("Invalid patch: %v", err)
	}
	for _, op := range ops {
		field := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")[0]
		if field != "name" && field != "extra" {
			return web.BadRequest("Cannot patch %s. Only the following can be updated: name, extra", op.Path)
		}
		if field == "name" && op.Op != "remove" {
			var name *string
			if err := json.Unmarshal(op.Value, &name); err != nil {
				return web.BadRequest("Schema error for allocation: /name: expected string or null")
			}
			if name != nil && *name != "" && !web.ValidLogicalName(*name, ver) {
				return web.BadRequest("Cannot update allocation with invalid name '%s'", *name)
			}
		}
	}
	patch, err := jsonpatch.DecodePatch(body)
	if err != nil {
		return web.BadRequest("Invalid patch: %v", err)
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
		raw, _ := json.Marshal(doc)
		patched, err := patch.Apply(raw)
		if err != nil {
			return web.BadRequest("Patch could not be applied: %v", err)
		}
		var out struct {
			Name  *string        `json:"name"`
			Extra map[string]any `json:"extra"`
		}
		if err := json.Unmarshal(patched, &out); err != nil {
			return web.BadRequest("Invalid patch result: %v", err)
		}
		if out.Name != nil && *out.Name == "" {
			out.Name = nil
		}
		err = q.UpdateAllocationNameExtra(ctx, UpdateAllocationNameExtraParams{Name: out.Name, Extra: jsonOrEmpty(out.Extra), ID: v.ID})
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
	return c.JSON(http.StatusOK, result.Doc(h.base(c), ver))
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
