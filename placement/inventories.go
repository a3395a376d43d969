package placement

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/web"
)

// Inventories of a resource provider, as Placement 8.0's
// handlers/inventory.py serves them:
//
//	GET    /resource_providers/{uuid}/inventories
//	POST   /resource_providers/{uuid}/inventories
//	PUT    /resource_providers/{uuid}/inventories          (replace all)
//	DELETE /resource_providers/{uuid}/inventories          (1.5+, 405 before)
//	GET    /resource_providers/{uuid}/inventories/{class}
//	PUT    /resource_providers/{uuid}/inventories/{class}
//	DELETE /resource_providers/{uuid}/inventories/{class}
//
// Every write bumps the provider generation by compare-and-set (first, so
// that the provider row is locked for the rest of the transaction, which
// serialises inventory writes with allocation claims, which lock the same
// row); a lost race is 409 placement.concurrent_update.
// registerInventories adds the routes of provider inventories.
func (h *Handler) registerInventories(g *echo.Group) {
	g.GET("/resource_providers/:uuid/inventories", h.can(ruleInventoriesList, h.getInventories), checkAccept)
	g.POST("/resource_providers/:uuid/inventories", h.can(ruleInventoriesCreate, h.createInventory))
	g.PUT("/resource_providers/:uuid/inventories", h.can(ruleInventoriesUpdate, h.setInventories))
	g.DELETE("/resource_providers/:uuid/inventories", h.can(ruleInventoriesDelete, h.deleteInventories))
	g.GET("/resource_providers/:uuid/inventories/:resource_class", h.can(ruleInventoriesShow, h.getInventory), checkAccept)
	g.PUT("/resource_providers/:uuid/inventories/:resource_class", h.can(ruleInventoriesUpdate, h.updateInventory))
	g.DELETE("/resource_providers/:uuid/inventories/:resource_class", h.can(ruleInventoriesDelete, h.deleteInventory))
}

// maxInt is Placement's db constants MAX_INT, the upper bound of every
// integer inventory field and the default max_unit.
const maxInt = math.MaxInt32

// inventoryProps are the properties of Placement's BASE_INVENTORY_SCHEMA.
const inventoryProps = `
  "resource_provider_generation": {"type": "integer"},
  "total": {"type": "integer", "maximum": 2147483647, "minimum": 1},
  "reserved": {"type": "integer", "maximum": 2147483647, "minimum": 0},
  "min_unit": {"type": "integer", "maximum": 2147483647, "minimum": 1},
  "max_unit": {"type": "integer", "maximum": 2147483647, "minimum": 1},
  "step_size": {"type": "integer", "maximum": 2147483647, "minimum": 1},
  "allocation_ratio": {"type": "number", "maximum": 3.40282e+38}`

// rcPattern is Placement's RC_PATTERN.
const rcPattern = `^[A-Z0-9_]+$`

var (
	// baseInventorySchema is Placement's BASE_INVENTORY_SCHEMA (PUT of one
	// inventory).
	baseInventorySchema = mustBodySchema("base_inventory", `{"type": "object",
  "properties": {`+inventoryProps+`},
  "required": ["total", "resource_provider_generation"],
  "additionalProperties": false}`)
	// postInventorySchema is Placement's POST_INVENTORY_SCHEMA.
	postInventorySchema = mustBodySchema("post_inventory", `{"type": "object",
  "properties": {`+inventoryProps+`,
    "resource_class": {"type": "string", "pattern": "`+rcPattern+`"}},
  "required": ["total", "resource_class"],
  "additionalProperties": false}`)
	// putInventoriesSchema is Placement's PUT_INVENTORY_SCHEMA.
	putInventoriesSchema = mustBodySchema("put_inventories", `{"type": "object",
  "properties": {
    "resource_provider_generation": {"type": "integer"},
    "inventories": {"type": "object", "patternProperties": {"`+rcPattern+`": {
      "type": "object", "properties": {`+inventoryProps+`},
      "required": ["total"], "additionalProperties": false}}}},
  "required": ["resource_provider_generation", "inventories"],
  "additionalProperties": false}`)
)

// inventoryBody is one inventory record of a request; absent fields take
// Placement's INVENTORY_DEFAULTS.
type inventoryBody struct {
	ResourceClass   string   `json:"resource_class"`
	Generation      *jsonInt `json:"resource_provider_generation"`
	Total           jsonInt  `json:"total"`
	Reserved        *jsonInt `json:"reserved"`
	MinUnit         *jsonInt `json:"min_unit"`
	MaxUnit         *jsonInt `json:"max_unit"`
	StepSize        *jsonInt `json:"step_size"`
	AllocationRatio *float64 `json:"allocation_ratio"`
}

// inventory is an inventory record with defaults applied.
type inventory struct {
	ResourceClass   string
	Total           int32
	Reserved        int32
	MinUnit         int32
	MaxUnit         int32
	StepSize        int32
	AllocationRatio float64
	Modified        time.Time
}

func (b inventoryBody) inventory(class string) inventory {
	inv := inventory{ResourceClass: class, Total: int32(b.Total), MinUnit: 1, MaxUnit: maxInt, StepSize: 1, AllocationRatio: 1}
	if b.Reserved != nil {
		inv.Reserved = int32(*b.Reserved)
	}
	if b.MinUnit != nil {
		inv.MinUnit = int32(*b.MinUnit)
	}
	if b.MaxUnit != nil {
		inv.MaxUnit = int32(*b.MaxUnit)
	}
	if b.StepSize != nil {
		inv.StepSize = int32(*b.StepSize)
	}
	if b.AllocationRatio != nil {
		inv.AllocationRatio = *b.AllocationRatio
	}
	return inv
}

// capacity is Placement's Inventory.capacity: int((total - reserved) *
// allocation_ratio), truncated.
func (inv inventory) capacity() int64 {
	return int64(float64(int64(inv.Total)-int64(inv.Reserved)) * inv.AllocationRatio)
}

// json is the inventory as Placement serialises it; generation is included
// only when non-zero, as _serialize_inventory does.
func (inv inventory) json(generation int32) map[string]any {
	m := map[string]any{
		"total":            inv.Total,
		"reserved":         inv.Reserved,
		"min_unit":         inv.MinUnit,
		"max_unit":         inv.MaxUnit,
		"step_size":        inv.StepSize,
		"allocation_ratio": pyFloat(inv.AllocationRatio),
	}
	if generation != 0 {
		m["resource_provider_generation"] = generation
	}
	return m
}

// checkCapacity is Placement's _validate_inventory_capacity: before 1.26
// reserved must be below total (capacity > 0); from 1.26 reserved may equal
// total (capacity >= 0). metalloc also refuses what Placement lets through
// but no allocation could use: min_unit above max_unit, and an
// allocation_ratio that is not positive. A max_unit above total is
// accepted, as Placement does: GET shows 2147483647 for an inventory
// written without max_unit, and clients PUT what they read back
// (`openstack resource provider inventory set --amend`). It returns the
// text for a 400, "" when valid.
func checkCapacity(v web.Version, rp uuid.UUID, invs ...inventory) string {
	for _, inv := range invs {
		if !v.AtLeast(1, 26) && inv.capacity() <= 0 {
			return fmt.Sprintf("Invalid inventory for '%s' on resource provider '%s'. "+
				"The reserved value is greater than or equal to total.", inv.ResourceClass, rp)
		}
		if v.AtLeast(1, 26) && inv.capacity() < 0 {
			return fmt.Sprintf("Invalid inventory for '%s' on resource provider '%s'. "+
				"The reserved value is greater than total.", inv.ResourceClass, rp)
		}
		switch {
		case inv.AllocationRatio <= 0:
			return fmt.Sprintf("Invalid inventory for '%s' on resource provider '%s'. "+
				"The allocation_ratio must be greater than 0.", inv.ResourceClass, rp)
		case inv.MinUnit > inv.MaxUnit:
			return fmt.Sprintf("Invalid inventory for '%s' on resource provider '%s'. "+
				"The min_unit (%d) is greater than max_unit (%d).", inv.ResourceClass, rp, inv.MinUnit, inv.MaxUnit)
		}
	}
	return ""
}

// noteOverCapacity warns (log and metric) when the provider's allocations
// of the class now use more than inv's capacity. Placement 8.0 accepts such
// an inventory (Nova's resource tracker and metalloc's own depend on it,
// for example when a node's resource class changes under an allocation);
// the over-commitment stays visible instead: a warning, the counter
// metalloc_placement_inventory_over_capacity_total and
// "metalloc-manage status upgrade-check".
func (h *Handler) noteOverCapacity(c echo.Context, q *Queries, rp ProviderRow, classID int32, inv inventory) error {
	used, err := q.ProviderClassUsage(c.Request().Context(), ProviderClassUsageParams{ProviderID: rp.ID, ClassID: classID})
	if err != nil {
		return err
	}
	if used > inv.capacity() {
		web.Logger(c).Warn("inventory update leaves allocations above capacity",
			zap.Stringer("resource_provider", rp.Uuid), zap.String("resource_class", inv.ResourceClass),
			zap.Int64("used", used), zap.Int64("capacity", inv.capacity()))
		if h.overCapacity != nil {
			h.overCapacity.WithLabelValues(inv.ResourceClass).Inc()
		}
	}
	return nil
}

// pathProvider loads the provider named by the path's uuid; a malformed
// uuid is as unknown as a missing one (404). notFound rewords the 404 the
// way the calling Placement handler does ("" keeps providerByUUID's).
func (h *Handler) pathProvider(c echo.Context, q *Queries, notFound string) (ProviderRow, error) {
	raw := c.Param("uuid")
	id, err := uuid.Parse(raw)
	if err == nil {
		var rp ProviderRow
		rp, err = h.providerByUUID(c.Request().Context(), q, id)
		if err == nil {
			return rp, nil
		}
	} else {
		err = web.PlacementErr(http.StatusNotFound, "", "No resource provider with uuid %s found", raw)
	}
	var pe *web.PlacementError
	if notFound != "" && errors.As(err, &pe) && pe.Status == http.StatusNotFound {
		return ProviderRow{}, web.PlacementErr(http.StatusNotFound, "",
			"No resource provider with uuid %s found : %s", raw, pe.Detail)
	}
	return ProviderRow{}, err
}

// loadInventories lists the provider's inventories by class name.
func loadInventories(ctx context.Context, q *Queries, providerID int64) ([]inventory, error) {
	rows, err := q.ProviderInventories(ctx, providerID)
	if err != nil {
		return nil, err
	}
	out := make([]inventory, 0, len(rows))
	for _, r := range rows {
		m := r.CreatedAt
		if r.UpdatedAt != nil {
			m = *r.UpdatedAt
		}
		out = append(out, inventory{ResourceClass: r.ResourceClass, Total: r.Total, Reserved: r.Reserved,
			MinUnit: r.MinUnit, MaxUnit: r.MaxUnit, StepSize: r.StepSize, AllocationRatio: r.AllocationRatio,
			Modified: m})
	}
	return out, nil
}

// sendInventories answers {"resource_provider_generation", "inventories"},
// with cache headers from 1.15 (last-modified: the newest inventory, none
// when there is no inventory).
func sendInventories(c echo.Context, generation int32, invs []inventory) error {
	out := make(map[string]any, len(invs))
	var last time.Time
	for _, inv := range invs {
		out[inv.ResourceClass] = inv.json(0)
		if inv.Modified.After(last) {
			last = inv.Modified
		}
	}
	if web.PlacementRequestVersion(c).AtLeast(1, 15) {
		if len(invs) == 0 {
			// Placement has no timestamp to give then, and sends none.
			c.Response().Header().Set("Cache-Control", "no-cache")
		} else {
			setCacheHeaders(c, &last)
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"resource_provider_generation": generation, "inventories": out})
}

// sendInventory answers one inventory with the provider generation.
func sendInventory(c echo.Context, status int, generation int32, inv inventory) error {
	if web.PlacementRequestVersion(c).AtLeast(1, 15) {
		setCacheHeaders(c, &inv.Modified)
	}
	return c.JSON(status, inv.json(generation))
}

// getInventories is GET /resource_providers/{uuid}/inventories.
func (h *Handler) getInventories(c echo.Context) error {
	ctx := c.Request().Context()
	rp, err := h.pathProvider(c, h.q, "found")
	if err != nil {
		return err
	}
	invs, err := loadInventories(ctx, h.q, rp.ID)
	if err != nil {
		return err
	}
	return sendInventories(c, rp.Generation, invs)
}

// getInventory is GET /resource_providers/{uuid}/inventories/{class}: 404
// when the provider has no inventory of the class.
func (h *Handler) getInventory(c echo.Context) error {
	ctx := c.Request().Context()
	rp, err := h.pathProvider(c, h.q, "found")
	if err != nil {
		return err
	}
	invs, err := loadInventories(ctx, h.q, rp.ID)
	if err != nil {
		return err
	}
	class := c.Param("resource_class")
	for _, inv := range invs {
		if inv.ResourceClass == class {
			return sendInventory(c, http.StatusOK, rp.Generation, inv)
		}
	}
	return web.PlacementErr(http.StatusNotFound, "", "No inventory of class %s for %s", class, c.Param("uuid"))
}

// createInventory is POST /resource_providers/{uuid}/inventories: 201 with
// a Location header; an inventory of the class already there is 409
// placement.concurrent_update; an unknown class or a bad capacity is 400.
func (h *Handler) createInventory(c echo.Context) error {
	ctx := c.Request().Context()
	if err := requireJSONContent(c); err != nil {
		return err
	}
	rp, err := h.pathProvider(c, h.q, "")
	if err != nil {
		return web.PlacementRaised(err) // Placement lets this NotFound escape
	}
	var body inventoryBody
	if err := postInventorySchema.decode(c, &body); err != nil {
		return err
	}
	inv := body.inventory(body.ResourceClass)
	if msg := checkCapacity(web.PlacementRequestVersion(c), rp.Uuid, inv); msg != "" {
		return web.PlacementErr(http.StatusBadRequest, "",
			"Unable to create inventory for resource provider %s: %s", rp.Uuid, msg)
	}
	err = h.runTx(ctx, func(q *Queries) error {
		if err := bumpGeneration(ctx, q, rp.ID, rp.Generation); err != nil {
			return err
		}
		classID, err := resourceClassID(ctx, q, inv.ResourceClass)
		if err != nil {
			return rewordPlacementErr(err, "Unable to create inventory for resource provider %s: %s", rp.Uuid)
		}
		err = q.InsertInventory(ctx, inventoryParams(rp.ID, classID, inv))
		if isUniqueViolation(err) {
			return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
				"Update conflict: Inventory for '%s' on resource provider '%s' already exists.",
				inv.ResourceClass, rp.Uuid)
		}
		return err
	})
	if err != nil {
		return err
	}
	inv.Modified = time.Now()
	setLocation(c, fmt.Sprintf("/resource_providers/%s/inventories/%s", rp.Uuid, inv.ResourceClass))
	return sendInventory(c, http.StatusCreated, rp.Generation+1, inv)
}

// updateInventory is PUT /resource_providers/{uuid}/inventories/{class}:
// the body's resource_provider_generation must be current (409
// placement.concurrent_update); the provider must have inventory of the
// class (400), the class must exist (404). Shrinking the capacity below
// current usage is accepted with a warning, as Placement 8.0
// (noteOverCapacity).
func (h *Handler) updateInventory(c echo.Context) error {
	ctx := c.Request().Context()
	if err := requireJSONContent(c); err != nil {
		return err
	}
	rp, err := h.pathProvider(c, h.q, "")
	if err != nil {
		return web.PlacementRaised(err) // Placement lets this NotFound escape
	}
	var body inventoryBody
	if err := baseInventorySchema.decode(c, &body); err != nil {
		return err
	}
	if int32(*body.Generation) != rp.Generation || int64(*body.Generation) != int64(int32(*body.Generation)) {
		return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
			"resource provider generation conflict")
	}
	class := c.Param("resource_class")
	inv := body.inventory(class)
	if msg := checkCapacity(web.PlacementRequestVersion(c), rp.Uuid, inv); msg != "" {
		return web.PlacementErr(http.StatusBadRequest, "",
			"Unable to update inventory for resource provider %s: %s", rp.Uuid, msg)
	}
	err = h.runTx(ctx, func(q *Queries) error {
		if err := bumpGeneration(ctx, q, rp.ID, rp.Generation); err != nil {
			var pe *web.PlacementError
			if errors.As(err, &pe) {
				return web.PlacementErr(pe.Status, pe.Code, "update conflict: %s", concurrentUpdateDetail)
			}
			return err
		}
		classID, err := resourceClassID(ctx, q, class)
		if err != nil {
			var pe *web.PlacementError
			if errors.As(err, &pe) {
				return web.PlacementErr(http.StatusNotFound, "", "%s", pe.Detail)
			}
			return err
		}
		p := inventoryParams(rp.ID, classID, inv)
		n, err := q.UpdateInventory(ctx, UpdateInventoryParams{ProviderID: p.ProviderID, ClassID: p.ClassID,
			Total: p.Total, Reserved: p.Reserved, MinUnit: p.MinUnit, MaxUnit: p.MaxUnit, StepSize: p.StepSize,
			AllocationRatio: p.AllocationRatio})
		if err != nil {
			return err
		}
		if n == 0 {
			return web.PlacementErr(http.StatusBadRequest, "",
				"No inventory record with resource class for resource provider %s: No inventory of class %s found.",
				rp.Uuid, class)
		}
		return h.noteOverCapacity(c, q, rp, classID, inv)
	})
	if err != nil {
		return err
	}
	inv.Modified = time.Now()
	return sendInventory(c, http.StatusOK, rp.Generation+1, inv)
}

// setInventories is PUT /resource_providers/{uuid}/inventories: replaces
// every inventory of the provider in one transaction. A stale generation is
// 409 placement.concurrent_update, an unknown class 400, removing an
// inventory that has allocations 409 placement.inventory.inuse; shrinking
// one below its usage is accepted with a warning (noteOverCapacity).
func (h *Handler) setInventories(c echo.Context) error {
	ctx := c.Request().Context()
	if err := requireJSONContent(c); err != nil {
		return err
	}
	rp, err := h.pathProvider(c, h.q, "")
	if err != nil {
		return web.PlacementRaised(err) // Placement lets this NotFound escape
	}
	var body struct {
		Generation  jsonInt                  `json:"resource_provider_generation"`
		Inventories map[string]inventoryBody `json:"inventories"`
	}
	if err := putInventoriesSchema.decode(c, &body); err != nil {
		return err
	}
	if int64(body.Generation) != int64(rp.Generation) {
		return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
			"resource provider generation conflict")
	}
	invs := make([]inventory, 0, len(body.Inventories))
	for class, b := range body.Inventories {
		invs = append(invs, b.inventory(class))
	}
	if msg := checkCapacity(web.PlacementRequestVersion(c), rp.Uuid, invs...); msg != "" {
		return web.PlacementErr(http.StatusBadRequest, "",
			"Unable to update inventory for resource provider %s: %s", rp.Uuid, msg)
	}
	err = h.runTx(ctx, func(q *Queries) error {
		if err := bumpGeneration(ctx, q, rp.ID, rp.Generation); err != nil {
			var pe *web.PlacementError
			if errors.As(err, &pe) {
				return web.PlacementErr(pe.Status, pe.Code, "update conflict: %s", concurrentUpdateDetail)
			}
			return err
		}
		return h.replaceInventories(c, q, rp, invs, "update conflict: ")
	})
	if err != nil {
		var pe *web.PlacementError
		if errors.As(err, &pe) && pe.Status == http.StatusBadRequest && strings.HasPrefix(pe.Detail, "No such resource class") {
			return web.PlacementErr(http.StatusBadRequest, "",
				"Unknown resource class in inventory for resource provider %s: %s", rp.Uuid, pe.Detail)
		}
		return err
	}
	now := time.Now()
	for i := range invs {
		invs[i].Modified = now
	}
	return sendInventories(c, rp.Generation+1, invs)
}

// replaceInventories makes the provider's inventories exactly invs (the
// provider row locked by the caller): removed classes must have no
// allocations (409 placement.inventory.inuse, detail prefixed with
// inUsePrefix), unknown classes are 400 "No such resource class X.".
func (h *Handler) replaceInventories(c echo.Context, q *Queries, rp ProviderRow, invs []inventory, inUsePrefix string) error {
	ctx := c.Request().Context()
	current, err := q.ProviderInventories(ctx, rp.ID)
	if err != nil {
		return err
	}
	wanted := make(map[string]bool, len(invs))
	for _, inv := range invs {
		wanted[inv.ResourceClass] = true
	}
	var remove []int32
	existing := make(map[string]bool, len(current))
	for _, cur := range current {
		existing[cur.ResourceClass] = true
		if !wanted[cur.ResourceClass] {
			remove = append(remove, cur.ResourceClassID)
		}
	}
	if len(remove) > 0 {
		inUse, err := q.ClassesInUse(ctx, ClassesInUseParams{ProviderID: rp.ID, ClassIds: remove})
		if err != nil {
			return err
		}
		if len(inUse) > 0 {
			return web.PlacementErr(http.StatusConflict, web.PlacementCodeInventoryInUse,
				"%sInventory for '%s' on resource provider '%s' in use.", inUsePrefix, strings.Join(inUse, ", "), rp.Uuid)
		}
		if _, err := q.DeleteInventories(ctx, DeleteInventoriesParams{ProviderID: rp.ID, ClassIds: remove}); err != nil {
			return err
		}
	}
	for _, inv := range invs {
		classID, err := resourceClassID(ctx, q, inv.ResourceClass)
		if err != nil {
			return err
		}
		p := inventoryParams(rp.ID, classID, inv)
		if existing[inv.ResourceClass] {
			if _, err := q.UpdateInventory(ctx, UpdateInventoryParams{ProviderID: p.ProviderID, ClassID: p.ClassID,
				Total: p.Total, Reserved: p.Reserved, MinUnit: p.MinUnit, MaxUnit: p.MaxUnit, StepSize: p.StepSize,
				AllocationRatio: p.AllocationRatio}); err != nil {
				return err
			}
			if err := h.noteOverCapacity(c, q, rp, classID, inv); err != nil {
				return err
			}
		} else if err := q.InsertInventory(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// deleteInventories is DELETE /resource_providers/{uuid}/inventories
// (microversion 1.5; 405 before): removes every inventory unless some is in
// use (409 placement.inventory.inuse).
func (h *Handler) deleteInventories(c echo.Context) error {
	ctx := c.Request().Context()
	if !web.PlacementRequestVersion(c).AtLeast(1, 5) {
		return web.PlacementErr(http.StatusMethodNotAllowed, "",
			"The method specified is not allowed for this resource.")
	}
	rp, err := h.pathProvider(c, h.q, "")
	if err != nil {
		return web.PlacementRaised(err) // Placement lets this NotFound escape
	}
	err = h.runTx(ctx, func(q *Queries) error {
		if err := bumpGeneration(ctx, q, rp.ID, rp.Generation); err != nil {
			if !isPlacementErr(err) {
				return err
			}
			return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
				"Unable to delete inventory for resource provider %s because the inventory was updated by "+
					"another process. Please retry your request.", rp.Uuid)
		}
		return h.replaceInventories(c, q, rp, nil, "")
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// deleteInventory is DELETE /resource_providers/{uuid}/inventories/{class}:
// 404 when there is no such inventory or class, 409 when it is in use
// (Placement answers that one with code placement.concurrent_update).
func (h *Handler) deleteInventory(c echo.Context) error {
	ctx := c.Request().Context()
	rp, err := h.pathProvider(c, h.q, "")
	if err != nil {
		return web.PlacementRaised(err) // Placement lets this NotFound escape
	}
	class := c.Param("resource_class")
	err = h.runTx(ctx, func(q *Queries) error {
		if err := bumpGeneration(ctx, q, rp.ID, rp.Generation); err != nil {
			if !isPlacementErr(err) {
				return err
			}
			return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
				"Unable to delete inventory of class %s: %s", class, concurrentUpdateDetail)
		}
		classID, err := resourceClassID(ctx, q, class)
		if err != nil {
			var pe *web.PlacementError
			if errors.As(err, &pe) {
				return web.PlacementErr(http.StatusNotFound, "",
					"No inventory of class %s found for delete: %s", class, pe.Detail)
			}
			return err
		}
		inUse, err := q.ClassesInUse(ctx, ClassesInUseParams{ProviderID: rp.ID, ClassIds: []int32{classID}})
		if err != nil {
			return err
		}
		if len(inUse) > 0 {
			return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
				"Unable to delete inventory of class %s: Inventory for '%s' on resource provider '%s' in use.",
				class, class, rp.Uuid)
		}
		n, err := q.DeleteInventories(ctx, DeleteInventoriesParams{ProviderID: rp.ID, ClassIds: []int32{classID}})
		if err != nil {
			return err
		}
		if n == 0 {
			return web.PlacementErr(http.StatusNotFound, "",
				"No inventory of class %s found for delete: No inventory of class %s found for delete", class, class)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// inventoryParams are the row values of inv.
func inventoryParams(providerID int64, classID int32, inv inventory) InsertInventoryParams {
	return InsertInventoryParams{ProviderID: providerID, ClassID: classID, Total: inv.Total, Reserved: inv.Reserved,
		MinUnit: inv.MinUnit, MaxUnit: inv.MaxUnit, StepSize: inv.StepSize, AllocationRatio: inv.AllocationRatio}
}

// rewordPlacementErr keeps a *web.PlacementError's status and code and
// rewrites its detail as format(arg, old detail); other errors pass.
func rewordPlacementErr(err error, format string, arg any) error {
	var pe *web.PlacementError
	if errors.As(err, &pe) {
		return web.PlacementErr(pe.Status, pe.Code, format, arg, pe.Detail)
	}
	return err
}

// isPlacementErr reports whether err is a *web.PlacementError.
func isPlacementErr(err error) bool {
	var pe *web.PlacementError
	return errors.As(err, &pe)
}
