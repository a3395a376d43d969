package allocation

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/web"
)

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
	var req createRequest
	if err := DecodeBody(c, createSchema, "allocation", &req); err != nil {
		return err
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
	req.Name = NoName(req.Name)
	traits := UniqueTraits(req.Traits)
	extra, err := ExtraJSON(req.Extra)
	if err != nil {
		return err
	}
	params := CreateAllocationParams{Name: req.Name, Owner: req.Owner, State: StateAllocating, Traits: traits, Extra: extra}
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
	var gen uint64
	if !backfill {
		if params.Uuid == uuid.Nil {
			params.Uuid = uuid.New()
		}
		// The cache entry opens before the row exists: the row as
		// inserted is kept unless a change was notified meanwhile
		// (cache.go).
		gen = h.opts.Hub.cacheBegin(params.Uuid)
	}
	if waiting && !backfill {
		// Watch before the row exists: its activation cannot be missed,
		// and the wait needs no read of its own.
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
			uuids, err := resolveCandidates(ctx, q, req.CandidateNodes, Policy{h.opts.Rules}.CandidateScope(c))
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
		return h.concealHolder(c, err)
	}
	v := View{Allocation: allocationOf(row), Traits: params.Traits}
	if node != nil {
		v.NodeUUID = &node.Uuid
	}
	slices.Sort(v.Traits)
	h.opts.Hub.cacheFill(gen, v)
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
			return writeDoc(c, http.StatusCreated, View{Allocation: allocationOf(row), Traits: params.Traits}, h.base(c), ver, nil)
		}
	}
	return writeDoc(c, http.StatusCreated, v, h.base(c), ver, nil)
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
// order, without duplicates, among the nodes owned by or leased to project
// (every node when nil; see Policy.CandidateScope); any other one is a 400
// naming them (Ironic's check_node_list; the first web.MaxEchoed only,
// then how many more), as for POST /v1/allocations.
func (s *Store) ResolveCandidates(ctx context.Context, idents []string, project *string) ([]uuid.UUID, error) {
	return resolveCandidates(ctx, s.q, idents, project)
}

// resolveCandidates is ResolveCandidates on q.
func resolveCandidates(ctx context.Context, q *Queries, idents []string, project *string) ([]uuid.UUID, error) {
	var uuids []uuid.UUID
	var names []string
	for _, id := range idents {
		if u, ok := web.UUIDLike(id); ok {
			uuids = append(uuids, u)
		} else {
			names = append(names, id)
		}
	}
	rows, err := q.ResolveNodes(ctx, ResolveNodesParams{Uuids: uuids, Names: names, Project: project})
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
		return nil, web.BadRequest("Nodes cannot be found: %s", web.JoinSome(missing))
	}
	return out, nil
}
