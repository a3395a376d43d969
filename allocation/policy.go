package allocation

import (
	"errors"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// Access rule names of the allocation API (Ironic 21.4's).
const (
	ruleGet              = "baremetal:allocation:get"
	ruleUpdate           = "baremetal:allocation:update"
	ruleDelete           = "baremetal:allocation:delete"
	ruleCreate           = "baremetal:allocation:create"
	ruleCreateRestricted = "baremetal:allocation:create_restricted"
	ruleCreatePreRBAC    = "baremetal:allocation:create_pre_rbac"
)

// checkAllocation applies rule to allocation v (owned by v.Owner) for the
// request's caller, as Ironic's check_allocation_policy_and_retrieve: a
// caller who may not even baremetal:allocation:get it gets 404 (its
// existence is concealed), one who may see it but not perform rule 403.
// rule "" checks only visibility.
func (h *Handler) checkAllocation(c echo.Context, v View, ident, rule string) error {
	return Policy{h.opts.Rules}.Check(c, v.Owner, rule, web.NotFound("Allocation %s could not be found.", ident))
}

// Policy applies the allocation access rules (baremetal:allocation:*) to
// a resource owned the way an allocation is: allocation groups (package
// allocgroup) follow the rules of the allocations they are made of.
type Policy struct{ Rules auth.Rules }

// Rules Policy.Check applies besides visibility (baremetal:allocation:get).
const (
	RuleUpdate = ruleUpdate
	RuleDelete = ruleDelete
)

// Check applies rule to a resource of owner for the request's caller: a
// caller who may not baremetal:allocation:get it gets hidden (a 404 that
// conceals its existence), one who may see it but not perform rule 403.
// rule "" checks only visibility.
func (p Policy) Check(c echo.Context, owner *string, rule string, hidden error) error {
	r := p.Rules
	if r.Open() {
		return nil
	}
	creds := auth.Caller(c.Request().Context())
	t := auth.Target(creds, "allocation.owner", deref(owner))
	if !r.Allowed(ruleGet, t, creds) {
		return hidden
	}
	if rule != "" && !r.Allowed(rule, t, creds) {
		return node.Forbidden(rule)
	}
	return nil
}

// AuthorizeCreate decides who may create a resource asked for *owner and
// whose it is, as POST /v1/allocations does (see authorizeCreate); it may
// set *owner to the caller's project.
func (p Policy) AuthorizeCreate(c echo.Context, owner **string) error {
	return authorizeCreate(c, p.Rules, owner)
}

// CandidateScope is the project whose nodes (owned or leased) the
// request's caller may name in candidate_nodes, as Ironic's POST
// /v1/allocations: nil (every node) for a caller allowed
// baremetal:allocation:create_restricted, one without a project, and
// without access rules; otherwise the caller's project, and another
// project's node is "Nodes cannot be found" (400), as one that does not
// exist (its uuid is not disclosed).
func (p Policy) CandidateScope(c echo.Context) *string {
	r := p.Rules
	if r.Open() {
		return nil
	}
	creds := auth.Caller(c.Request().Context())
	if r.Allowed(ruleCreateRestricted, auth.Target(creds), creds) {
		return nil
	}
	return nonEmpty(creds.ProjectID)
}

// ListScope is the owner a list must be limited to for the caller (nil:
// all), as GET /v1/allocations; owner is the owner asked for.
func (p Policy) ListScope(c echo.Context, owner *string) (*string, error) {
	return node.ListScope(c, p.Rules, "allocation", owner)
}

// checkAllocationRule checks rule alone on v, without hiding it first:
// DELETE /v1/nodes/{ident}/allocation does so once the node is visible, so
// a caller who sees the node but not its allocation gets 403 (Ironic's
// NodeAllocationController.delete).
func (h *Handler) checkAllocationRule(c echo.Context, v View, rule string) error {
	r := h.opts.Rules
	if r.Open() {
		return nil
	}
	creds := auth.Caller(c.Request().Context())
	if !r.Allowed(rule, auth.Target(creds, "allocation.owner", deref(v.Owner)), creds) {
		return node.Forbidden(rule)
	}
	return nil
}

// checkNodeVisible is the baremetal:node:get check of the
// /v1/nodes/{ident}/allocation routes: 404 for a node the caller may not
// see.
func (h *Handler) checkNodeVisible(c echo.Context, q *Queries, nodeID int64, ident string) error {
	if h.opts.Rules.Open() {
		return nil
	}
	t, err := q.NodeTenancy(c.Request().Context(), nodeID)
	if err != nil {
		return web.NotFound("Node %s could not be found.", ident)
	}
	return node.CheckNode(c, h.opts.Rules, t.Owner, t.Lessee, ident)
}

// concealHolder hides from err, when it is an *InstanceHeldError, the node
// holding the instance uuid if the caller may not see that node (Ironic
// names the node being associated, which its caller sees; metalloc's POST
// refuses before any node is, and names the holder only to a caller who
// may baremetal:node:get it). Other errors are returned as they are.
func (h *Handler) concealHolder(c echo.Context, err error) error {
	var held *InstanceHeldError
	if !errors.As(err, &held) || held.Seen ||
		node.CheckNode(c, h.opts.Rules, held.Owner, held.Lessee, held.Holder.String()) == nil {
		return err
	}
	return held.Hidden()
}

// authorizeCreate decides who may create req and whose it is, as Ironic's
// _authorize_create_allocation and post: a caller allowed
// baremetal:allocation:create (and, with enforce_new_defaults off and no
// owner given, create_pre_rbac) creates as asked; otherwise a
// project-scoped caller may create for its own project only (another owner
// is 403), needs create_restricted, and the allocation's owner becomes its
// project. With enforce_new_defaults on, a caller that is not system-scoped
// gets its project as owner when none is given, and may name another
// owner only with create_restricted. The owner scopes the node search to
// nodes it owns or leases.
func (h *Handler) authorizeCreate(c echo.Context, req *createRequest) error {
	return authorizeCreate(c, h.opts.Rules, &req.Owner)
}

func authorizeCreate(c echo.Context, r auth.Rules, reqOwner **string) error {
	if r.Open() {
		return nil
	}
	creds := auth.Caller(c.Request().Context())
	t := auth.Target(creds)
	owner, project := deref(*reqOwner), creds.ProjectID
	ok := r.Allowed(ruleCreate, t, creds)
	if ok && !r.EnforceNewDefaults && owner == "" {
		ok = r.Allowed(ruleCreatePreRBAC, t, creds)
	}
	if !ok {
		if project != "" && owner != "" && owner != project {
			return node.Forbidden(ruleCreate)
		}
		if owner != "" && !r.EnforceNewDefaults && !r.Allowed(ruleCreatePreRBAC, t, creds) {
			return node.Forbidden(ruleCreatePreRBAC)
		}
		if !r.Allowed(ruleCreateRestricted, t, creds) {
			return node.Forbidden(ruleCreateRestricted)
		}
		*reqOwner = nonEmpty(project)
	}
	if r.EnforceNewDefaults && !creds.System() {
		if owner = deref(*reqOwner); owner == "" {
			*reqOwner = nonEmpty(project)
		} else if owner != project && !r.Allowed(ruleCreateRestricted, t, creds) {
			return web.Errorf(403, "Cannot create allocation with an owner Project ID value %s not matching the requestor Project ID %s. Policy %s is required for this capability.",
				owner, project, ruleCreateRestricted)
		}
	}
	return nil
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
