package placement

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// POST /reshaper (microversion 1.30; 404 before), as Placement 8.0's
// handlers/reshaper.py: replaces the inventories of the given providers and
// the allocations of the given consumers atomically, so that inventory and
// the allocations against it can move between providers (e.g. from a
// compute node to a new child provider) without a moment where either is
// missing or doubled.
// registerReshaper adds the routes of reshaper.
func (h *Handler) registerReshaper(g *echo.Group) {
	g.POST("/reshaper", since(1, 30, h.can(ruleReshape, h.reshape)))
}

// reshaperSchema is Placement's POST_RESHAPER_SCHEMA (allocations as POST
// /allocations at 1.28, possibly empty), with the 1.34 and 1.38 allocation
// variants.
func reshaperSchema(consumer string) *bodySchema {
	inventories := `{"type": "object", "properties": {
    "resource_provider_generation": {"type": "integer"},
    "inventories": {"type": "object", "patternProperties": {"` + rcPattern + `": {
      "type": "object", "properties": {` + inventoryProps + `},
      "required": ["total"], "additionalProperties": false}}}},
  "required": ["resource_provider_generation", "inventories"],
  "additionalProperties": false}`
	return mustBodySchema("reshaper", `{"type": "object", "properties": {
  "inventories": {"type": "object", "patternProperties": {"`+uuidPattern+`": `+inventories+`},
    "minProperties": 1, "additionalProperties": false},
  "allocations": {"type": "object", "minProperties": 0, "additionalProperties": false,
    "patternProperties": {"`+uuidPattern+`": `+consumer+`}}},
  "required": ["inventories", "allocations"], "additionalProperties": false}`)
}

var (
	reshaperSchema130 = reshaperSchema(cons128)
	reshaperSchema134 = reshaperSchema(cons134)
	reshaperSchema138 = reshaperSchema(cons138)
)

// reshape is POST /reshaper. An unknown provider in inventories is 400
// placement.resource_provider.not_found, a stale provider or consumer
// generation 409 placement.concurrent_update, an unknown resource class 400
// "malformed reshaper data: ...", removing inventory still allocated 409
// placement.inventory.inuse, allocations that do not fit 409. Success is
// 204. Everything happens in one transaction, with the providers locked as
// allocation writes lock them.
func (h *Handler) reshape(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.PlacementRequestVersion(c)
	if !v.AtLeast(1, 30) {
		return web.PlacementErr(http.StatusNotFound, "", "The resource could not be found.")
	}
	if err := requireJSONContent(c); err != nil {
		return err
	}
	s := reshaperSchema130
	switch {
	case v.AtLeast(1, 38):
		s = reshaperSchema138
	case v.AtLeast(1, 34):
		s = reshaperSchema134
	}
	var body struct {
		Inventories map[string]struct {
			Generation  jsonInt                  `json:"resource_provider_generation"`
			Inventories map[string]inventoryBody `json:"inventories"`
		} `json:"inventories"`
		Allocations map[string]consumerBody `json:"allocations"`
	}
	if err := s.decode(c, &body); err != nil {
		return err
	}

	// Providers in inventories must exist and be at the given generation.
	var targets []reshapeTarget
	var lock []uuid.UUID
	for raw, in := range body.Inventories {
		id, err := uuid.Parse(raw)
		var rp ProviderRow
		if err == nil {
			rp, err = h.providerByUUID(ctx, h.q, id)
		}
		if err != nil {
			var pe *web.PlacementError
			if id == uuid.Nil || errors.As(err, &pe) {
				return web.PlacementErr(http.StatusBadRequest, web.PlacementCodeProviderNotFound,
					"Resource provider %s in inventories not found: No resource provider with uuid %s found", raw, raw)
			}
			return err
		}
		if int64(in.Generation) != int64(rp.Generation) {
			return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
				"resource provider generation conflict for provider %s: actual: %d, given: %d",
				raw, rp.Generation, int64(in.Generation))
		}
		t := reshapeTarget{rp: rp, generation: int64(in.Generation)}
		for class, b := range in.Inventories {
			t.invs = append(t.invs, b.inventory(class))
		}
		targets = append(targets, t)
		lock = append(lock, rp.Uuid)
	}

	claims := make([]claim, 0, len(body.Allocations))
	for raw, b := range body.Allocations {
		consumer, err := uuid.Parse(raw)
		if err != nil {
			return web.PlacementErr(http.StatusBadRequest, "", "Malformed consumer_uuid: %s", raw)
		}
		if err := checkProviderKeys(b.Allocations); err != nil {
			return err
		}
		claims = append(claims, claimFromBody(consumer, b))
	}

	// removed holds, by provider, the classes to drop once the new
	// allocations are in.
	removed := map[int64][]int32{}
	err := h.runTx(ctx, func(q *Queries) error {
		hooks := claimHooks{lock: lock}
		hooks.afterLock = func(locked map[uuid.UUID]LockClaimProvidersRow) error {
			for _, t := range targets {
				row, ok := locked[t.rp.Uuid]
				if !ok || int64(row.Generation) != t.generation {
					return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
						"update conflict: %s", concurrentUpdateDetail)
				}
				// Interim inventory: the new records plus the removed ones,
				// which go after the allocations moved off them.
				current, err := q.ProviderInventories(ctx, t.rp.ID)
				if err != nil {
					return err
				}
				existing := map[string]bool{}
				wanted := map[string]bool{}
				for _, inv := range t.invs {
					wanted[inv.ResourceClass] = true
				}
				for _, cur := range current {
					existing[cur.ResourceClass] = true
					if !wanted[cur.ResourceClass] {
						removed[t.rp.ID] = append(removed[t.rp.ID], cur.ResourceClassID)
					}
				}
				for _, inv := range t.invs {
					classID, err := resourceClassID(ctx, q, inv.ResourceClass)
					if err != nil {
						return err
					}
					p := inventoryParams(t.rp.ID, classID, inv)
					if existing[inv.ResourceClass] {
						_, err = q.UpdateInventory(ctx, UpdateInventoryParams{ProviderID: p.ProviderID, ClassID: p.ClassID,
							Total: p.Total, Reserved: p.Reserved, MinUnit: p.MinUnit, MaxUnit: p.MaxUnit,
							StepSize: p.StepSize, AllocationRatio: p.AllocationRatio})
					} else {
						err = q.InsertInventory(ctx, p)
					}
					if err != nil {
						return err
					}
				}
			}
			return nil
		}
		hooks.afterInsert = func() error {
			for _, t := range targets {
				ids := removed[t.rp.ID]
				if len(ids) == 0 {
					continue
				}
				inUse, err := q.ClassesInUse(ctx, ClassesInUseParams{ProviderID: t.rp.ID, ClassIds: ids})
				if err != nil {
					return err
				}
				if len(inUse) > 0 {
					return web.PlacementErr(http.StatusConflict, web.PlacementCodeInventoryInUse,
						"update conflict: Inventory for '%s' on resource provider '%s' in use.",
						strings.Join(inUse, ", "), t.rp.Uuid)
				}
				if _, err := q.DeleteInventories(ctx, DeleteInventoriesParams{ProviderID: t.rp.ID, ClassIds: ids}); err != nil {
					return err
				}
			}
			return nil
		}
		var allocBumped map[int64]bool
		hooks.allocationBumps = func(ids map[int64]bool) { allocBumped = ids }
		if err := writeAllocationsTx(ctx, q, v, claims, func(detail string) string {
			return "malformed reshaper data: " + detail
		}, hooks); err != nil {
			return err
		}
		return bumpReshapeTargets(ctx, q, targets, allocBumped)
	})
	if err != nil {
		var pe *web.PlacementError
		if errors.As(err, &pe) && pe.Status == http.StatusBadRequest && strings.HasPrefix(pe.Detail, "No such resource class") {
			return web.PlacementErr(http.StatusBadRequest, "", "malformed reshaper data: %s", pe.Detail)
		}
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// reshapeTarget is a provider whose inventory a reshape replaces.
type reshapeTarget struct {
	rp         ProviderRow
	generation int64
	invs       []inventory
}

// bumpReshapeTargets gives each reshaped provider the generation Placement's
// reshape leaves it with: one increment for the interim inventory (when the
// new inventory is not empty), one when the allocation write touches it
// (allocBumped: the new allocations name it, or a consumer given no
// allocations leaves it), one for the final inventory. writeAllocationsTx
// has made one (the providers it locks for the reshaper); the others are
// made here.
func bumpReshapeTargets(ctx context.Context, q *Queries, targets []reshapeTarget, allocBumped map[int64]bool) error {
	var once, twice []int64
	for _, t := range targets {
		n := 0
		if len(t.invs) > 0 {
			n++
		}
		if allocBumped[t.rp.ID] {
			n++
		}
		switch n {
		case 1:
			once = append(once, t.rp.ID)
		case 2:
			once = append(once, t.rp.ID)
			twice = append(twice, t.rp.ID)
		}
	}
	for _, ids := range [][]int64{once, twice} {
		if len(ids) == 0 {
			continue
		}
		if err := q.BumpProviderGenerations(ctx, ids); err != nil {
			return err
		}
	}
	return nil
}
