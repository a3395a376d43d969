package placement

import (
	"net/http"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// registerAggregates adds the routes of provider aggregates.
func (h *Handler) registerAggregates(g *echo.Group) {
	g.GET("/resource_providers/:uuid/aggregates", since(1, 1, h.can(ruleAggregatesList, h.getProviderAggregates)), checkAccept)
	g.PUT("/resource_providers/:uuid/aggregates", since(1, 1, h.can(ruleAggregatesUpdate, h.putProviderAggregates)))
}

// Placement's PUT_AGGREGATES_SCHEMA_V1_1 (a bare list of unique uuids) and
// PUT_AGGREGATES_SCHEMA_V1_19 (that list with the provider generation).
var (
	putAggregatesSchema = mustBodySchema("put_aggregates_1_1", `{
		"type": "array", "items": {"type": "string", "format": "uuid"}, "uniqueItems": true}`)
	putAggregatesSchema119 = mustBodySchema("put_aggregates_1_19", `{
		"type": "object",
		"properties": {
			"aggregates": {"type": "array", "items": {"type": "string", "format": "uuid"}, "uniqueItems": true},
			"resource_provider_generation": {"type": "integer"}
		},
		"required": ["aggregates", "resource_provider_generation"],
		"additionalProperties": false}`)
)

// aggregatesJSON is the body of the aggregates handlers: {"aggregates":
// [...]}, plus resource_provider_generation from 1.19, as Placement's
// _send_aggregates. From 1.15 cache-control is set and last-modified is
// now (Placement records no time for the associations).
func aggregatesJSON(c echo.Context, aggs []uuid.UUID, generation int32) error {
	if aggs == nil {
		aggs = []uuid.UUID{}
	}
	v := web.PlacementRequestVersion(c)
	out := map[string]any{"aggregates": aggs}
	if v.AtLeast(1, 19) {
		out["resource_provider_generation"] = generation
	}
	if v.AtLeast(1, 15) {
		setCacheHeaders(c, nil)
	}
	return c.JSON(http.StatusOK, out)
}

// getProviderAggregates is GET /resource_providers/{uuid}/aggregates
// (1.1+): the aggregate uuids the provider is associated with.
func (h *Handler) getProviderAggregates(c echo.Context) error {
	rp, err := h.providerFromPathRaised(c, h.q)
	if err != nil {
		return err
	}
	aggs, err := h.q.ProviderAggregateUUIDs(c.Request().Context(), rp.ID)
	if err != nil {
		return err
	}
	return aggregatesJSON(c, aggs, rp.Generation)
}

// putProviderAggregates is PUT /resource_providers/{uuid}/aggregates
// (1.1+), as Placement's set_aggregates: the given uuids replace the
// provider's associations in one transaction. Before 1.19 the body is a
// bare list and the generation is untouched; from 1.19 the body carries
// resource_provider_generation, a stale one is 409
// placement.concurrent_update, and the generation is incremented (on every
// successful PUT, as Placement does, whether or not the set changed).
func (h *Handler) putProviderAggregates(c echo.Context) error {
	ctx := c.Request().Context()
	consider := web.PlacementRequestVersion(c).AtLeast(1, 19)
	if err := requireJSONContent(c); err != nil {
		return err
	}
	if _, err := h.providerFromPathRaised(c, h.q); err != nil {
		return err
	}
	var aggs []uuid.UUID
	var expected int32
	if consider {
		var in struct {
			Aggregates []uuid.UUID `json:"aggregates"`
			Generation int32       `json:"resource_provider_generation"`
		}
		if _, err := readBody(c, putAggregatesSchema119, &in); err != nil {
			return err
		}
		aggs, expected = in.Aggregates, in.Generation
	} else if _, err := readBody(c, putAggregatesSchema, &aggs); err != nil {
		return err
	}
	var gen int32
	err := h.runTx(ctx, func(q *Queries) error {
		rp, err := h.providerFromPathRaised(c, q)
		if err != nil {
			return err
		}
		gen = rp.Generation
		if consider {
			if rp.Generation != expected {
				return errGenerationChanged()
			}
			if err := bumpGeneration(ctx, q, rp.ID, rp.Generation); err != nil {
				return err
			}
			gen++
		}
		if err := q.ProviderAggregatesClear(ctx, rp.ID); err != nil {
			return err
		}
		return q.ProviderAggregatesAdd(ctx, ProviderAggregatesAddParams{ID: rp.ID, AggregateUuids: aggs})
	})
	if isFKViolation(err) {
		// The provider was deleted meanwhile.
		return web.PlacementRaised(errProviderNotFound(c.Param("uuid")))
	}
	if err != nil {
		return err
	}
	return aggregatesJSON(c, aggs, gen)
}
