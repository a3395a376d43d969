package placement

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/placement/candidate"
	"github.com/metalloc/metalloc/web"
)

// registerProviders adds the routes of resource providers.
func (h *Handler) registerProviders(g *echo.Group) {
	g.GET("/resource_providers", h.can(ruleProviderList, h.listProviders), checkAccept)
	g.POST("/resource_providers", h.can(ruleProviderCreate, h.createProvider))
	g.GET("/resource_providers/:uuid", h.can(ruleProviderShow, h.getProvider), checkAccept)
	g.PUT("/resource_providers/:uuid", h.can(ruleProviderUpdate, h.updateProvider))
	g.DELETE("/resource_providers/:uuid", h.can(ruleProviderDelete, h.deleteProvider))
}

// ProviderRow is a resource provider as the handlers use it: its own columns
// plus the uuids of its parent (nil for a root) and root provider, as
// Placement's _get_provider_by_uuid returns them. It is the row sqlc
// generates for the ProviderGet query.
type ProviderRow = ProviderGetRow

// providerByUUID loads the provider id. A missing provider is a 404 with
// Placement's detail "No resource provider with uuid <uuid> found" and the
// default error code (placement.undefined_code), as Placement answers when
// ResourceProvider.get_by_uuid raises NotFound in any handler. Callers that
// need another wording (inventories: "... found : <reason>") may replace the
// *web.PlacementError they get. q may be bound to a transaction.
func (h *Handler) providerByUUID(ctx context.Context, q *Queries, id uuid.UUID) (ProviderRow, error) {
	rp, err := q.ProviderGet(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return rp, errProviderNotFound(id.String())
	}
	return rp, err
}

// providerFromPath loads the provider named by the ":uuid" path parameter;
// a value that is no uuid is a 404 like an unknown one, as in Placement
// (its routes take any string there).
func (h *Handler) providerFromPath(c echo.Context, q *Queries) (ProviderRow, error) {
	raw := c.Param("uuid")
	id, err := uuid.Parse(raw)
	if err != nil {
		return ProviderRow{}, errProviderNotFound(raw)
	}
	return h.providerByUUID(c.Request().Context(), q, id)
}

// providerFromPathRaised is providerFromPath for the handlers in which
// Placement lets the provider's NotFound escape (it is raised past the
// microversion middleware: no Vary header, see web.PlacementError.Raised).
func (h *Handler) providerFromPathRaised(c echo.Context, q *Queries) (ProviderRow, error) {
	rp, err := h.providerFromPath(c, q)
	return rp, web.PlacementRaised(err)
}

// errProviderNotFound is the 404 Placement answers for an unknown provider.
func errProviderNotFound(id string) *web.PlacementError {
	return web.PlacementErr(http.StatusNotFound, "", "No resource provider with uuid %s found", id)
}

// concurrentUpdateDetail is Placement's ResourceProviderConcurrentUpdateDetected
// message.
const concurrentUpdateDetail = "Another thread concurrently updated the resource provider data. Please retry your update"

// bumpGeneration increments provider id's generation if it is still expected
// (compare-and-set), as Placement's _increment_provider_generation. When it
// is not (another writer won), it answers 409 with code
// placement.concurrent_update and the detail "Update conflict: Another thread
// concurrently updated the resource provider data. Please retry your update",
// which is what Placement's inventory and aggregate handlers answer. q should
// be bound to the transaction making the change.
func bumpGeneration(ctx context.Context, q *Queries, id int64, expected int32) error {
	n, err := q.ProviderBumpGeneration(ctx, ProviderBumpGenerationParams{ID: id, Generation: expected})
	if err != nil {
		return err
	}
	if n == 0 {
		return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
			"Update conflict: %s", concurrentUpdateDetail)
	}
	return nil
}

// providerURL is the path of a provider, as Placement's resource_provider_url.
func providerURL(id uuid.UUID) string { return "/resource_providers/" + id.String() }

// providerJSON is the representation of rp at microversion v, as
// Placement's _serialize_provider: links gain aggregates (1.1), traits
// (1.6) and allocations (1.11); parent and root uuids appear from 1.14.
func providerJSON(rp ProviderRow, v web.Version) map[string]any {
	self := providerURL(rp.Uuid)
	links := []map[string]string{{"rel": "self", "href": self}}
	rels := []string{"inventories", "usages"}
	if v.AtLeast(1, 1) {
		rels = append(rels, "aggregates")
	}
	if v.AtLeast(1, 6) {
		rels = append(rels, "traits")
	}
	if v.AtLeast(1, 11) {
		rels = append(rels, "allocations")
	}
	for _, r := range rels {
		links = append(links, map[string]string{"rel": r, "href": self + "/" + r})
	}
	out := map[string]any{
		"uuid":       rp.Uuid,
		"name":       rp.Name,
		"generation": rp.Generation,
		"links":      links,
	}
	if v.AtLeast(1, 14) {
		out["parent_provider_uuid"] = rp.ParentProviderUuid
		out["root_provider_uuid"] = rp.RootProviderUuid
	}
	return out
}

// providerModified is Placement's pick_last_modified for one provider:
// updated_at, else created_at.
func providerModified(rp ProviderRow) time.Time {
	if rp.UpdatedAt != nil {
		return *rp.UpdatedAt
	}
	return rp.CreatedAt
}

var (
	postProviderSchema = mustBodySchema("post_resource_provider", `{
		"type": "object",
		"properties": {
			"name": {"type": "string", "maxLength": 200},
			"uuid": {"type": "string", "format": "uuid"}
		},
		"required": ["name"],
		"additionalProperties": false}`)
	postProviderSchema114 = mustBodySchema("post_resource_provider_1_14", `{
		"type": "object",
		"properties": {
			"name": {"type": "string", "maxLength": 200},
			"uuid": {"type": "string", "format": "uuid"},
			"parent_provider_uuid": {"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]}
		},
		"required": ["name"],
		"additionalProperties": false}`)
	putProviderSchema = mustBodySchema("put_resource_provider", `{
		"type": "object",
		"properties": {"name": {"type": "string", "maxLength": 200}},
		"required": ["name"],
		"additionalProperties": false}`)
	putProviderSchema114 = mustBodySchema("put_resource_provider_1_14", `{
		"type": "object",
		"properties": {
			"name": {"type": "string", "maxLength": 200},
			"parent_provider_uuid": {"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]}
		},
		"required": ["name"],
		"additionalProperties": false}`)
)

// providerBody is the body of POST and PUT /resource_providers.
type providerBody struct {
	Name   string     `json:"name"`
	UUID   *uuid.UUID `json:"uuid"`
	Parent *uuid.UUID `json:"parent_provider_uuid"`
}

// createProvider is POST /resource_providers, as Placement's
// create_resource_provider: 201 with an empty body and a Location before
// 1.20, 200 with the provider (and Location, last-modified) from 1.20; a
// uuid or name already taken is 409 placement.duplicate_name; an unknown or
// self parent is 400.
func (h *Handler) createProvider(c echo.Context) error {
	v := web.PlacementRequestVersion(c)
	s := postProviderSchema
	if v.AtLeast(1, 14) {
		s = postProviderSchema114
	}
	var in providerBody
	if _, err := readBody(c, s, &in); err != nil {
		return err
	}
	id := uuid.New()
	if in.UUID != nil {
		id = *in.UUID
	}
	ctx := c.Request().Context()
	actionErr := func(reason string) error {
		return web.PlacementErr(http.StatusBadRequest, "",
			"Unable to create resource provider \"%s\", %s: Object action create failed because: %s",
			in.Name, id, reason)
	}
	if in.Name == "" {
		// The schema allows "", Placement's object refuses it.
		return actionErr("name is required")
	}
	var rp ProviderRow
	err := h.runTx(ctx, func(q *Queries) error {
		params := ProviderInsertParams{Uuid: id, Name: in.Name}
		if in.Parent != nil {
			if *in.Parent == id {
				return actionErr("parent provider UUID cannot be same as UUID. Please set parent provider UUID to None if there is no parent.")
			}
			parent, err := q.ProviderGet(ctx, *in.Parent)
			if errors.Is(err, pgx.ErrNoRows) {
				return actionErr("parent provider UUID does not exist.")
			} else if err != nil {
				return err
			}
			params.ParentProviderID = &parent.ID
			params.RootProviderID = parent.RootProviderID
		}
		newID, err := q.ProviderInsert(ctx, params)
		if errors.Is(err, pgx.ErrNoRows) {
			return duplicateProvider(ctx, q, id, in.Name)
		}
		if isFKViolation(err) {
			return actionErr("parent provider UUID does not exist.")
		}
		if err != nil {
			return err
		}
		if params.ParentProviderID == nil {
			if err := q.ProviderSetOwnRoot(ctx, newID); err != nil {
				return err
			}
		}
		rp, err = q.ProviderGet(ctx, id)
		return err
	})
	if err != nil {
		return err
	}
	setLocation(c, providerURL(rp.Uuid))
	if v.AtLeast(1, 20) {
		t := providerModified(rp)
		setCacheHeaders(c, &t)
		return c.JSON(http.StatusOK, providerJSON(rp, v))
	}
	return c.NoContent(http.StatusCreated)
}

// duplicateProvider is Placement's 409 for a uuid or name already taken:
// "Conflicting resource provider uuid: X, name: Y already exists.".
func duplicateProvider(ctx context.Context, q *Queries, id uuid.UUID, name string) error {
	var dups []string
	if taken, err := q.ProviderUUIDTaken(ctx, id); err != nil {
		return err
	} else if taken {
		dups = append(dups, "uuid: "+id.String())
	}
	if taken, err := q.ProviderNameTaken(ctx, ProviderNameTakenParams{Name: name}); err != nil {
		return err
	} else if taken {
		dups = append(dups, "name: "+name)
	}
	return web.PlacementErr(http.StatusConflict, web.PlacementCodeDuplicateName,
		"Conflicting resource provider %s already exists.", strings.Join(dups, ", "))
}

// getProvider is GET /resource_providers/{uuid}, as Placement's
// get_resource_provider (last-modified and cache-control from 1.15).
func (h *Handler) getProvider(c echo.Context) error {
	rp, err := h.providerFromPathRaised(c, h.q)
	if err != nil {
		return err
	}
	v := web.PlacementRequestVersion(c)
	if v.AtLeast(1, 15) {
		t := providerModified(rp)
		setCacheHeaders(c, &t)
	}
	return c.JSON(http.StatusOK, providerJSON(rp, v))
}

// updateProvider is PUT /resource_providers/{uuid}, as Placement's
// update_resource_provider: the name is replaced; from 1.14 a parent may be
// set on a provider without one; from 1.37 a provider may also be moved to
// another parent or made a root (its subtree follows to the new root), but
// never under itself or its descendants. Failures are 400 "Unable to save
// resource provider ..."; a name taken is 409 placement.duplicate_name. The
// generation does not change, as in Placement.
func (h *Handler) updateProvider(c echo.Context) error {
	v := web.PlacementRequestVersion(c)
	ctx := c.Request().Context()
	if err := requireJSONContent(c); err != nil {
		return err
	}
	if _, err := h.providerFromPathRaised(c, h.q); err != nil {
		return err
	}
	s := putProviderSchema
	if v.AtLeast(1, 14) {
		s = putProviderSchema114
	}
	var in providerBody
	doc, err := readBody(c, s, &in)
	if err != nil {
		return err
	}
	_, parentGiven := doc.(map[string]any)["parent_provider_uuid"]
	allowReparent := v.AtLeast(1, 37)
	var rp ProviderRow
	err = h.runTx(ctx, func(q *Queries) error {
		var err error
		if rp, err = h.providerFromPathRaised(c, q); err != nil {
			return err
		}
		if _, err := q.ProviderLockForUpdate(ctx, rp.ID); errors.Is(err, pgx.ErrNoRows) {
			// Deleted by a concurrent request since it was read.
			return web.PlacementRaised(errProviderNotFound(rp.Uuid.String()))
		} else if err != nil {
			return err
		}
		actionErr := func(action, reason string) error {
			return web.PlacementErr(http.StatusBadRequest, "",
				"Unable to save resource provider %s: Object action %s failed because: %s", rp.Uuid, action, reason)
		}
		params := ProviderUpdateParams{ID: rp.ID, Name: in.Name, ParentProviderID: rp.ParentProviderID,
			RootProviderID: rp.RootProviderID}
		var newRoot *int64
		if parentGiven && in.Parent != nil {
			parent, err := q.ProviderGet(ctx, *in.Parent)
			if errors.Is(err, pgx.ErrNoRows) {
				return actionErr("create", "parent provider UUID does not exist.")
			} else if err != nil {
				return err
			}
			if rp.ParentProviderID != nil && *rp.ParentProviderID != parent.ID && !allowReparent {
				return actionErr("update", "re-parenting a provider is not currently allowed.")
			}
			if rp.ParentProviderID == nil || *rp.ParentProviderID != parent.ID {
				sub, err := q.ProviderSubtreeIDs(ctx, rp.ID)
				if err != nil {
					return err
				}
				for _, s := range sub {
					if s == parent.ID {
						return actionErr("update", "creating loop in the provider tree is not allowed.")
					}
				}
				params.ParentProviderID = &parent.ID
				newRoot = parent.RootProviderID
			}
		} else if parentGiven && rp.ParentProviderID != nil {
			if !allowReparent {
				return actionErr("update", "un-parenting a provider is not currently allowed.")
			}
			params.ParentProviderID = nil
			newRoot = &rp.ID
		}
		if newRoot != nil {
			params.RootProviderID = newRoot
		}
		if taken, err := q.ProviderNameTaken(ctx, ProviderNameTakenParams{Name: in.Name, ID: rp.ID}); err != nil {
			return err
		} else if taken {
			return web.PlacementErr(http.StatusConflict, web.PlacementCodeDuplicateName,
				"Conflicting resource provider %s already exists.", in.Name)
		}
		if _, err := q.ProviderUpdate(ctx, params); err != nil {
			if isUniqueViolation(err) {
				return web.PlacementErr(http.StatusConflict, web.PlacementCodeDuplicateName,
					"Conflicting resource provider %s already exists.", in.Name)
			}
			if isFKViolation(err) {
				return actionErr("update", "parent provider UUID does not exist.")
			}
			return err
		}
		if newRoot != nil {
			sub, err := q.ProviderSubtreeIDs(ctx, rp.ID)
			if err != nil {
				return err
			}
			if err := q.ProviderSetRootFor(ctx, ProviderSetRootForParams{RootProviderID: newRoot, Ids: sub}); err != nil {
				return err
			}
		}
		rp, err = q.ProviderGet(ctx, rp.Uuid)
		return err
	})
	if err != nil {
		return err
	}
	if v.AtLeast(1, 15) {
		t := providerModified(rp)
		setCacheHeaders(c, &t)
	}
	return c.JSON(http.StatusOK, providerJSON(rp, v))
}

// deleteProvider is DELETE /resource_providers/{uuid}, as Placement's
// delete_resource_provider: 204; 404 "No resource provider with uuid X
// found for delete"; 409 placement.resource_provider.cannot_delete_parent
// with children, 409 placement.resource_provider.inuse with allocations.
// Its inventories, traits and aggregate associations go with it.
func (h *Handler) deleteProvider(c echo.Context) error {
	ctx := c.Request().Context()
	raw := c.Param("uuid")
	notFound := web.PlacementErr(http.StatusNotFound, "", "No resource provider with uuid %s found for delete", raw)
	id, err := uuid.Parse(raw)
	if err != nil {
		return notFound
	}
	inUse := web.PlacementErr(http.StatusConflict, web.PlacementCodeProviderInUse,
		"Unable to delete resource provider %s: Resource provider has allocations.", id)
	hasChildren := web.PlacementErr(http.StatusConflict, web.PlacementCodeCannotDeleteParent,
		"Unable to delete parent resource provider %s: It has child resource providers.", id)
	err = h.runTx(ctx, func(q *Queries) error {
		rp, err := q.ProviderGet(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound
		} else if err != nil {
			return err
		}
		if _, err := q.ProviderLockForUpdate(ctx, rp.ID); errors.Is(err, pgx.ErrNoRows) {
			return notFound // a concurrent DELETE won
		} else if err != nil {
			return err
		}
		if has, err := q.ProviderHasChildren(ctx, rp.ID); err != nil {
			return err
		} else if has {
			return hasChildren
		}
		if has, err := q.ProviderHasAllocations(ctx, rp.ID); err != nil {
			return err
		} else if has {
			return inUse
		}
		_, err = q.ProviderDelete(ctx, rp.ID)
		return err
	})
	if isFKViolation(err) {
		// A child arrived after the checks: the only foreign keys left
		// that point at a provider are its children's (an allocation's
		// writer locks the provider first, and placement.allocations has
		// none since migration 00043).
		return hasChildren
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// providerFilter is the parsed query of GET /resource_providers.
type providerFilter struct {
	name, uuid, inTree *string
	memberOf           [][]uuid.UUID
	forbiddenAggs      []uuid.UUID
	required           [][]string
	forbiddenTraits    []string
	resources          []candidate.ResourceAmount
}

// listProviders is GET /resource_providers, as Placement's
// list_resource_providers: filters name, uuid; member_of (1.3; repeated
// and ANDed from 1.24; "!" forbidden from 1.32); resources (1.4: providers
// with capacity for every amount); in_tree (1.14); required traits (1.18;
// "!" forbidden from 1.22; "in:" any-of and repetition from 1.39).
// Unknown parameters, classes and traits are 400s.
func (h *Handler) listProviders(c echo.Context) error {
	v := web.PlacementRequestVersion(c)
	f, err := parseProviderFilter(c.QueryParams(), v)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	rows, err := h.queryProviders(ctx, f)
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(rows))
	var last time.Time
	for _, rp := range rows {
		if t := providerModified(rp); t.After(last) {
			last = t
		}
		out = append(out, providerJSON(rp, v))
	}
	if v.AtLeast(1, 15) {
		setCacheHeaders(c, &last)
	}
	return c.JSON(http.StatusOK, map[string]any{"resource_providers": out})
}

// parseProviderFilter validates the list query at microversion v.
func parseProviderFilter(q url.Values, v web.Version) (providerFilter, error) {
	var f providerFilter
	allowed := []string{"name", "uuid"}
	if v.AtLeast(1, 3) {
		allowed = append(allowed, "member_of")
	}
	if v.AtLeast(1, 4) {
		allowed = append(allowed, "resources")
	}
	if v.AtLeast(1, 14) {
		allowed = append(allowed, "in_tree")
	}
	if v.AtLeast(1, 18) {
		allowed = append(allowed, "required")
	}
	if err := checkQueryParams(q, allowed...); err != nil {
		return f, err
	}
	if _, ok := q["uuid"]; ok {
		s := lastValue(q, "uuid")
		if _, err := uuid.Parse(s); err != nil || len(s) != 36 {
			return f, badQueryUUID("uuid", s)
		}
		f.uuid = &s
	}
	if _, ok := q["in_tree"]; ok {
		s := lastValue(q, "in_tree")
		if _, err := uuid.Parse(s); err != nil || len(s) != 36 {
			return f, badQueryUUID("in_tree", s)
		}
		f.inTree = &s
	}
	if _, ok := q["name"]; ok {
		s := lastValue(q, "name")
		f.name = &s
	}
	if vals, ok := q["member_of"]; ok {
		var err error
		if f.memberOf, f.forbiddenAggs, err = parseMemberOf(vals, v); err != nil {
			return f, err
		}
	}
	if _, ok := q["resources"]; ok {
		var err error
		if f.resources, err = parseResources(lastValue(q, "resources")); err != nil {
			return f, err
		}
	}
	if vals, ok := q["required"]; ok {
		var err error
		if f.required, f.forbiddenTraits, err = parseRequired(vals, v); err != nil {
			return f, err
		}
	}
	return f, nil
}

// providerListSelect selects ProviderRow columns for the list.
const providerListSelect = `SELECT rp.id, rp.uuid, rp.name, rp.generation, rp.parent_provider_id, rp.root_provider_id,
       parent.uuid, root.uuid, rp.created_at, rp.updated_at
  FROM placement.resource_providers rp
  LEFT JOIN placement.resource_providers parent ON parent.id = rp.parent_provider_id
  LEFT JOIN placement.resource_providers root ON root.id = rp.root_provider_id
 WHERE true`

// queryProviders runs the filtered list (a query built from the filter's
// parts, as Placement's _get_all_by_filters_from_db). Unknown traits and
// resource classes are Placement's 400s.
func (h *Handler) queryProviders(ctx context.Context, f providerFilter) ([]ProviderRow, error) {
	var sb strings.Builder
	sb.WriteString(providerListSelect)
	var args []any
	arg := func(a any) string {
		args = append(args, a)
		return "$" + strconv.Itoa(len(args))
	}
	if f.name != nil {
		sb.WriteString(" AND rp.name = " + arg(*f.name))
	}
	if f.uuid != nil {
		sb.WriteString(" AND rp.uuid = " + arg(*f.uuid) + "::uuid")
	}
	if f.inTree != nil {
		sb.WriteString(" AND rp.root_provider_id = (SELECT t.root_provider_id FROM placement.resource_providers t WHERE t.uuid = " + arg(*f.inTree) + "::uuid)")
	}
	// Every named trait must exist, as Placement's trait cache demands.
	var allTraits []string
	for _, set := range f.required {
		allTraits = append(allTraits, set...)
	}
	allTraits = append(allTraits, f.forbiddenTraits...)
	if len(allTraits) > 0 {
		found, err := h.q.TraitsByNames(ctx, allTraits)
		if err != nil {
			return nil, err
		}
		known := map[string]bool{}
		for _, t := range found {
			known[t.Name] = true
		}
		var missing []string
		for _, t := range allTraits {
			if !known[t] && !contains(missing, t) {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			return nil, web.PlacementErr(http.StatusBadRequest, "",
				"Invalid trait(s) in \"required\" parameter: No such trait(s): %s.", strings.Join(missing, ", "))
		}
	}
	for _, set := range f.required {
		sb.WriteString(" AND EXISTS (SELECT 1 FROM placement.resource_provider_traits rpt JOIN placement.traits t ON t.id = rpt.trait_id WHERE rpt.resource_provider_id = rp.id AND t.name = ANY(" + arg(set) + "::text[]))")
	}
	if len(f.forbiddenTraits) > 0 {
		sb.WriteString(" AND NOT EXISTS (SELECT 1 FROM placement.resource_provider_traits rpt JOIN placement.traits t ON t.id = rpt.trait_id WHERE rpt.resource_provider_id = rp.id AND t.name = ANY(" + arg(f.forbiddenTraits) + "::text[]))")
	}
	for _, set := range f.memberOf {
		sb.WriteString(" AND EXISTS (SELECT 1 FROM placement.resource_provider_aggregates a WHERE a.resource_provider_id = rp.id AND a.aggregate_uuid = ANY(" + arg(set) + "::uuid[]))")
	}
	if len(f.forbiddenAggs) > 0 {
		sb.WriteString(" AND NOT EXISTS (SELECT 1 FROM placement.resource_provider_aggregates a WHERE a.resource_provider_id = rp.id AND a.aggregate_uuid = ANY(" + arg(f.forbiddenAggs) + "::uuid[]))")
	}
	for _, r := range f.resources {
		rcID, err := resourceClassID(ctx, h.q, r.Class)
		if err != nil {
			var pe *web.PlacementError
			if errors.As(err, &pe) {
				return nil, web.PlacementErr(http.StatusBadRequest, "",
					"Invalid resource class in resources parameter: %s", pe.Detail)
			}
			return nil, err
		}
		rc, amt := arg(rcID), arg(r.Amount)
		fmt.Fprintf(&sb, ` AND EXISTS (SELECT 1 FROM placement.inventories inv
 WHERE inv.resource_provider_id = rp.id AND inv.resource_class_id = %[1]s
   AND COALESCE((SELECT sum(al.used) FROM placement.allocations al
                  WHERE al.resource_provider_id = rp.id AND al.resource_class_id = %[1]s), 0) + %[2]s::bigint
       <= (inv.total - inv.reserved) * inv.allocation_ratio
   AND inv.min_unit <= %[2]s::bigint AND inv.max_unit >= %[2]s::bigint AND %[2]s::bigint %% inv.step_size = 0)`, rc, amt)
	}
	sb.WriteString(" ORDER BY rp.id")
	rows, err := h.pool.Query(ctx, sb.String(), args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ProviderRow, error) {
		var p ProviderRow
		err := r.Scan(&p.ID, &p.Uuid, &p.Name, &p.Generation, &p.ParentProviderID, &p.RootProviderID,
			&p.ParentProviderUuid, &p.RootProviderUuid, &p.CreatedAt, &p.UpdatedAt)
		return p, err
	})
}
