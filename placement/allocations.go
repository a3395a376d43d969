package placement

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// Allocations, as Placement 8.0's handlers/allocation.py serves them:
//
//	GET    /allocations/{consumer_uuid}
//	PUT    /allocations/{consumer_uuid}   (body format by microversion)
//	DELETE /allocations/{consumer_uuid}
//	POST   /allocations                   (1.13+, several consumers at once)
//	GET    /resource_providers/{uuid}/allocations
//
// A write is one transaction: the consumers are locked (or created) in
// uuid order, then every provider the write touches (new allocations and
// the consumers' current ones) is locked with SELECT ... FOR UPDATE in id
// order, the consumers' current allocations are removed, the new ones are
// checked against min_unit, max_unit, step_size and the capacity
// (total - reserved) * allocation_ratio given the usage read under the
// locks, written, and every touched provider's generation is bumped. All
// writers of allocations and inventories lock the provider rows, so racing
// claims never over-commit a provider; they queue instead of failing with
// generation conflicts.
// registerAllocations adds the routes of consumer and provider allocations.
func (h *Handler) registerAllocations(g *echo.Group) {
	g.GET("/allocations/:consumer_uuid", h.can(ruleAllocationsList, h.getConsumerAllocations), checkAccept)
	g.PUT("/allocations/:consumer_uuid", h.can(ruleAllocationsUpdate, h.putConsumerAllocations))
	g.DELETE("/allocations/:consumer_uuid", h.can(ruleAllocationsDelete, h.deleteConsumerAllocations))
	g.POST("/allocations", h.can(ruleAllocationsManage, h.postAllocations))
	g.GET("/resource_providers/:uuid/allocations", h.can(ruleProviderAllocations, h.getProviderAllocations), checkAccept)
}

// IncompleteConsumerID is Placement's default incomplete_consumer_project_id
// and incomplete_consumer_user_id: the project and user recorded for
// consumers whose allocations were written before microversion 1.8 without
// them.
const IncompleteConsumerID = "00000000-0000-0000-0000-000000000000"

// unknownConsumerType is how Placement shows a consumer without a type
// (1.38+): NULL_CONSUMER_TYPE_ALIAS.
const unknownConsumerType = "unknown"

// Placement's allocation schemas (schemas/allocation.py), by microversion.
const (
	uuidPattern         = `^[0-9a-fA-F-]{36}$`
	consumerTypePattern = `^[A-Z0-9_]+$`
	allocResources      = `"resources": {"type": "object", "minProperties": 1,
      "patternProperties": {"` + rcPattern + `": {"type": "integer", "minimum": 1}},
      "additionalProperties": false}`
	allocListProp = `"allocations": {"type": "array", "minItems": 1, "items": {"type": "object",
    "properties": {
      "resource_provider": {"type": "object",
        "properties": {"uuid": {"type": "string", "format": "uuid"}},
        "additionalProperties": false, "required": ["uuid"]},
      ` + allocResources + `},
    "required": ["resource_provider", "resources"], "additionalProperties": false}}`
	projectUserProps = `"project_id": {"type": "string", "minLength": 1, "maxLength": 255},
  "user_id": {"type": "string", "minLength": 1, "maxLength": 255}`
	consumerGenProp  = `"consumer_generation": {"type": ["integer", "null"]}`
	consumerTypeProp = `"consumer_type": {"type": "string", "pattern": "` + consumerTypePattern + `",
    "minLength": 1, "maxLength": 255}`
	mappingsProp = `"mappings": {"type": "object", "minProperties": 1,
    "patternProperties": {"[a-zA-Z0-9_-]{1,64}": {"type": "array", "minItems": 1,
      "items": {"type": "string", "format": "uuid"}}}}`
)

// allocDictProp is the 1.12+ "allocations" object (provider uuid →
// {generation, resources}), with minProperties min (0 where an empty
// object deletes the consumer's allocations).
func allocDictProp(min int) string {
	return fmt.Sprintf(`"allocations": {"type": "object", "minProperties": %d,
    "patternProperties": {"%s": {"type": "object",
      "properties": {"generation": {"type": "integer"}, %s},
      "required": ["resources"], "additionalProperties": false}},
    "additionalProperties": false}`, min, uuidPattern, allocResources)
}

// consumerSchemaDoc is the per-consumer allocation schema with props and
// required.
func consumerSchemaDoc(props []string, required []string) string {
	return fmt.Sprintf(`{"type": "object", "properties": {%s}, "required": ["%s"], "additionalProperties": false}`,
		strings.Join(props, ","), strings.Join(required, `","`))
}

// postSchemaDoc is POST /allocations' schema: consumer uuid → consumer.
func postSchemaDoc(consumer string) string {
	return fmt.Sprintf(`{"type": "object", "minProperties": 1, "additionalProperties": false,
  "patternProperties": {"%s": %s}}`, uuidPattern, consumer)
}

var (
	cons112 = consumerSchemaDoc([]string{allocDictProp(1), projectUserProps}, []string{"allocations", "project_id", "user_id"})
	consDel = consumerSchemaDoc([]string{allocDictProp(0), projectUserProps}, []string{"allocations", "project_id", "user_id"})
	cons128 = consumerSchemaDoc([]string{allocDictProp(0), projectUserProps, consumerGenProp},
		[]string{"allocations", "project_id", "user_id", "consumer_generation"})
	cons134 = consumerSchemaDoc([]string{allocDictProp(0), projectUserProps, consumerGenProp, mappingsProp},
		[]string{"allocations", "project_id", "user_id", "consumer_generation"})
	cons138 = consumerSchemaDoc([]string{allocDictProp(0), projectUserProps, consumerGenProp, mappingsProp, consumerTypeProp},
		[]string{"allocations", "project_id", "user_id", "consumer_generation", "consumer_type"})

	// PUT /allocations/{consumer_uuid} schemas: ALLOCATION_SCHEMA (1.0),
	// _V1_8, _V1_12, _V1_28, _V1_34, _V1_38.
	putAllocSchema10  = mustBodySchema("allocation_1_0", consumerSchemaDoc([]string{allocListProp}, []string{"allocations"}))
	putAllocSchema18  = mustBodySchema("allocation_1_8", consumerSchemaDoc([]string{allocListProp, projectUserProps}, []string{"allocations", "project_id", "user_id"}))
	putAllocSchema112 = mustBodySchema("allocation_1_12", cons112)
	putAllocSchema128 = mustBodySchema("allocation_1_28", cons128)
	putAllocSchema134 = mustBodySchema("allocation_1_34", cons134)
	putAllocSchema138 = mustBodySchema("allocation_1_38", cons138)

	// POST /allocations schemas: POST_ALLOCATIONS_V1_13, _V1_28, _V1_34,
	// _V1_38.
	postAllocSchema113 = mustBodySchema("post_allocations_1_13", postSchemaDoc(consDel))
	postAllocSchema128 = mustBodySchema("post_allocations_1_28", postSchemaDoc(cons128))
	postAllocSchema134 = mustBodySchema("post_allocations_1_34", postSchemaDoc(cons134))
	postAllocSchema138 = mustBodySchema("post_allocations_1_38", postSchemaDoc(cons138))
)

// consumerBody is one consumer's allocations in a request (1.12+ format;
// pre-1.12 list bodies are converted into it).
type consumerBody struct {
	Allocations  jsonObject[allocProviderBody] `json:"allocations"`
	ProjectID    *string                       `json:"project_id"`
	UserID       *string                       `json:"user_id"`
	Generation   *json.RawMessage              `json:"consumer_generation"`
	ConsumerType *string                       `json:"consumer_type"`
}

// allocProviderBody is the amounts a consumer body asks of one provider, by
// class, in the order given.
type allocProviderBody struct {
	Resources jsonObject[jsonInt] `json:"resources"`
}

// allocListBody is the pre-1.12 body.
type allocListBody struct {
	Allocations []struct {
		ResourceProvider struct {
			UUID string `json:"uuid"`
		} `json:"resource_provider"`
		Resources jsonObject[jsonInt] `json:"resources"`
	} `json:"allocations"`
	ProjectID *string `json:"project_id"`
	UserID    *string `json:"user_id"`
}

// claim is one consumer's wanted allocations, normalised.
type claim struct {
	consumer     uuid.UUID
	projectID    string
	userID       string
	consumerType *string
	generation   *int64 // consumer_generation; nil is null
	resources    []claimResource
}

// claimResource is one amount of one class on one provider.
type claimResource struct {
	provider uuid.UUID
	class    string
	used     int64
}

// claimFromBody normalises a 1.12+ consumer body.
func claimFromBody(consumer uuid.UUID, b consumerBody) claim {
	cl := claim{consumer: consumer, consumerType: b.ConsumerType}
	if b.ProjectID != nil {
		cl.projectID, cl.userID = *b.ProjectID, *b.UserID
	} else {
		cl.projectID, cl.userID = IncompleteConsumerID, IncompleteConsumerID
	}
	if b.Generation != nil && string(*b.Generation) != "null" {
		var g jsonInt
		if json.Unmarshal(*b.Generation, &g) == nil {
			v := int64(g)
			cl.generation = &v
		}
	}
	for _, rp := range b.Allocations.keys {
		id := uuid.MustParse(rp) // the schema checked the pattern; see checkProviderKeys
		cl.addProvider(id, b.Allocations.vals[rp].Resources)
	}
	return cl
}

// addProvider appends the amounts asked of provider, in the order given:
// Placement writes a consumer's allocations in the order of its request
// (providers, then each one's classes) and lists them back in that order
// (GET /allocations/{consumer_uuid}).
func (cl *claim) addProvider(provider uuid.UUID, resources jsonObject[jsonInt]) {
	for _, class := range resources.keys {
		cl.resources = append(cl.resources, claimResource{provider: provider, class: class, used: int64(resources.vals[class])})
	}
}

// checkProviderKeys rejects provider keys that match Placement's uuid
// pattern but do not parse: Placement looks them up and answers 400 (no
// such provider).
func checkProviderKeys[T any](allocs jsonObject[T]) error {
	for _, rp := range allocs.keys {
		if _, err := uuid.Parse(rp); err != nil {
			return web.PlacementErr(http.StatusBadRequest, "",
				"Allocation for resource provider '%s' that does not exist.", rp)
		}
	}
	return nil
}

// getConsumerAllocations is GET /allocations/{consumer_uuid}: the
// consumer's allocations by provider (empty, never 404, for an unknown
// consumer); project_id and user_id from 1.12, consumer_generation from
// 1.28, consumer_type from 1.38, when there are allocations.
func (h *Handler) getConsumerAllocations(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.PlacementRequestVersion(c)
	var rows []ConsumerAllocationsRow
	if id, err := uuid.Parse(c.Param("consumer_uuid")); err == nil {
		if rows, err = h.q.ConsumerAllocations(ctx, id); err != nil {
			return err
		}
	}
	// Providers in the order of their first allocation, each one's
	// classes in allocation order, members in Placement's order.
	var allocs jsonObject[*jsonObject[any]]
	var last time.Time
	for _, r := range rows {
		key := r.ProviderUuid.String()
		e, ok := allocs.get(key)
		if !ok {
			e = &jsonObject[any]{}
			e.set("resources", &jsonObject[int64]{})
			e.set("generation", r.ProviderGeneration)
			allocs.set(key, e)
		}
		res, _ := e.get("resources")
		res.(*jsonObject[int64]).set(r.ResourceClass, r.Used)
		last = newest(last, r.CreatedAt, r.UpdatedAt)
	}
	var out jsonObject[any]
	out.set("allocations", allocs)
	if len(rows) > 0 && v.AtLeast(1, 12) {
		out.set("project_id", rows[0].ProjectID)
		out.set("user_id", rows[0].UserID)
		if v.AtLeast(1, 28) {
			out.set("consumer_generation", rows[0].ConsumerGeneration)
		}
		if v.AtLeast(1, 38) {
			out.set("consumer_type", consumerTypeName(rows[0].ConsumerType))
		}
	}
	if v.AtLeast(1, 15) {
		setCacheHeaders(c, &last)
	}
	return c.JSON(http.StatusOK, out)
}

// getProviderAllocations is GET /resource_providers/{uuid}/allocations:
// the provider's allocations by consumer, with consumer_generation from
// 1.28; 404 for an unknown provider.
func (h *Handler) getProviderAllocations(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.PlacementRequestVersion(c)
	rp, err := h.pathProvider(c, h.q, "")
	if err != nil {
		var pe *web.PlacementError
		if errors.As(err, &pe) && pe.Status == http.StatusNotFound {
			return web.PlacementErr(http.StatusNotFound, "", "Resource provider '%s' not found: %s",
				c.Param("uuid"), pe.Detail)
		}
		return err
	}
	rows, err := h.q.ProviderAllocations(ctx, rp.ID)
	if err != nil {
		return err
	}
	allocs := map[string]any{}
	var last time.Time
	for _, r := range rows {
		key := r.ConsumerUuid.String()
		e, ok := allocs[key].(map[string]any)
		if !ok {
			e = map[string]any{"resources": map[string]any{}}
			if v.AtLeast(1, 28) {
				e["consumer_generation"] = r.ConsumerGeneration
			}
			allocs[key] = e
		}
		e["resources"].(map[string]any)[r.ResourceClass] = r.Used
		last = newest(last, r.CreatedAt, r.UpdatedAt)
	}
	if v.AtLeast(1, 15) {
		setCacheHeaders(c, &last)
	}
	return c.JSON(http.StatusOK, map[string]any{"allocations": allocs, "resource_provider_generation": rp.Generation})
}

// putConsumerAllocations is PUT /allocations/{consumer_uuid}: replaces the
// consumer's allocations (204). The body is a list of
// {resource_provider: {uuid}, resources} before 1.12 (project_id and
// user_id required from 1.8; without them the consumer gets
// IncompleteConsumerID), an object by provider uuid from 1.12; from 1.28
// consumer_generation is required (null for a new consumer; a mismatch is
// 409 placement.concurrent_update) and an empty allocations object removes
// every allocation; 1.34 accepts mappings; 1.38 requires consumer_type.
func (h *Handler) putConsumerAllocations(c echo.Context) error {
	v := web.PlacementRequestVersion(c)
	if err := requireJSONContent(c); err != nil {
		return err
	}
	raw := c.Param("consumer_uuid")
	consumer, err := uuid.Parse(raw)
	if err != nil || !looksLikeUUID(raw) {
		return web.PlacementErr(http.StatusBadRequest, "", "Malformed consumer_uuid: %s", raw)
	}
	var cl claim
	if !v.AtLeast(1, 12) {
		s := putAllocSchema10
		if v.AtLeast(1, 8) {
			s = putAllocSchema18
		}
		var b allocListBody
		if err := s.decode(c, &b); err != nil {
			return err
		}
		cl = claim{consumer: consumer, projectID: IncompleteConsumerID, userID: IncompleteConsumerID}
		if b.ProjectID != nil {
			cl.projectID, cl.userID = *b.ProjectID, *b.UserID
		}
		// A later entry for the same provider replaces an earlier one in
		// its place, as Placement's conversion to a dict does.
		var byProvider jsonObject[jsonObject[jsonInt]]
		for _, a := range b.Allocations {
			id, err := uuid.Parse(a.ResourceProvider.UUID)
			if err != nil {
				return web.PlacementErr(http.StatusBadRequest, "",
					"Allocation for resource provider '%s' that does not exist.", a.ResourceProvider.UUID)
			}
			byProvider.set(id.String(), a.Resources)
		}
		for _, rp := range byProvider.keys {
			cl.addProvider(uuid.MustParse(rp), byProvider.vals[rp])
		}
	} else {
		s := putAllocSchema112
		switch {
		case v.AtLeast(1, 38):
			s = putAllocSchema138
		case v.AtLeast(1, 34):
			s = putAllocSchema134
		case v.AtLeast(1, 28):
			s = putAllocSchema128
		}
		var b consumerBody
		if err := s.decode(c, &b); err != nil {
			return err
		}
		if err := checkProviderKeys(b.Allocations); err != nil {
			return err
		}
		cl = claimFromBody(consumer, b)
	}
	err = h.writeAllocations(c.Request().Context(), v, []claim{cl}, func(detail string) string {
		return fmt.Sprintf("Unable to allocate inventory for consumer %s: %s", consumer, detail)
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// postAllocations is POST /allocations (1.13+; 404 before): sets the
// allocations of several consumers in one transaction (an empty
// allocations object removes a consumer's), with the per-consumer rules of
// PUT at the same microversion. 204 on success.
func (h *Handler) postAllocations(c echo.Context) error {
	v := web.PlacementRequestVersion(c)
	if !v.AtLeast(1, 13) {
		return web.PlacementErr(http.StatusNotFound, "", "The resource could not be found.")
	}
	if err := requireJSONContent(c); err != nil {
		return err
	}
	s := postAllocSchema113
	switch {
	case v.AtLeast(1, 38):
		s = postAllocSchema138
	case v.AtLeast(1, 34):
		s = postAllocSchema134
	case v.AtLeast(1, 28):
		s = postAllocSchema128
	}
	var body map[string]consumerBody
	if err := s.decode(c, &body); err != nil {
		return err
	}
	claims := make([]claim, 0, len(body))
	for raw, b := range body {
		consumer, err := uuid.Parse(raw)
		if err != nil {
			return web.PlacementErr(http.StatusBadRequest, "", "Malformed consumer_uuid: %s", raw)
		}
		if err := checkProviderKeys(b.Allocations); err != nil {
			return err
		}
		claims = append(claims, claimFromBody(consumer, b))
	}
	err := h.writeAllocations(c.Request().Context(), v, claims, func(detail string) string {
		return "Unable to allocate inventory " + detail
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// deleteConsumerAllocations is DELETE /allocations/{consumer_uuid}: removes
// every allocation of the consumer and the consumer (204); 404 when it has
// none.
func (h *Handler) deleteConsumerAllocations(c echo.Context) error {
	ctx := c.Request().Context()
	raw := c.Param("consumer_uuid")
	notFound := web.PlacementErr(http.StatusNotFound, "", "No allocations for consumer '%s'", raw)
	consumer, err := uuid.Parse(raw)
	if err != nil {
		return notFound
	}
	err = h.runTx(ctx, func(q *Queries) error {
		cons, err := q.LockConsumer(ctx, consumer)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound
		}
		if err != nil {
			return err
		}
		ids, err := q.ConsumerAllocationProviders(ctx, cons.ID)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return notFound
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		if _, err := q.LockProviders(ctx, ids); err != nil {
			return err
		}
		if err := q.DeleteConsumerAllocations(ctx, []int64{cons.ID}); err != nil {
			return err
		}
		// As Placement's delete_all, the providers' generations stay.
		return q.DeleteConsumer(ctx, cons.ID)
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// consumerTypeName shows a consumer type, "unknown" for none.
func consumerTypeName(ct *string) string {
	if ct == nil {
		return unknownConsumerType
	}
	return *ct
}

// newest returns the latest of last, created and updated.
func newest(last, created time.Time, updated *time.Time) time.Time {
	t := created
	if updated != nil && updated.After(t) {
		t = *updated
	}
	if t.After(last) {
		return t
	}
	return last
}

// looksLikeUUID is oslo's is_uuid_like: a uuid in any accepted spelling
// (uuid.Parse also takes urn: and braces, which oslo accepts too).
func looksLikeUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil
}

// ---- request decoding shared by this package's inventory, allocation and
// reshaper handlers ----

// jsonInt is a JSON integer; a whole float such as 2.0 is accepted, as
// JSON Schema's "integer" does.
type jsonInt int64

// UnmarshalJSON reads an integer or a whole number.
func (n *jsonInt) UnmarshalJSON(b []byte) error {
	var num json.Number
	if err := json.Unmarshal(b, &num); err != nil {
		return err
	}
	if i, err := num.Int64(); err == nil {
		*n = jsonInt(i)
		return nil
	}
	f, err := num.Float64()
	if err != nil {
		return err
	}
	*n = jsonInt(f)
	return nil
}
