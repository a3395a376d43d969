package placement

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/trait"
	"github.com/metalloc/metalloc/web"
)

// registerTraits adds the routes of traits and provider traits.
func (h *Handler) registerTraits(g *echo.Group) {
	g.GET("/traits", since(1, 6, h.can(ruleTraitsList, h.listTraits)), checkAccept)
	g.GET("/traits/:name", since(1, 6, h.can(ruleTraitsShow, h.getTrait)))
	g.PUT("/traits/:name", since(1, 6, h.can(ruleTraitsUpdate, h.putTrait)))
	g.DELETE("/traits/:name", since(1, 6, h.can(ruleTraitsDelete, h.deleteTrait)))
	g.GET("/resource_providers/:uuid/traits", since(1, 6, h.can(ruleProviderTraitsList, h.getProviderTraits)), checkAccept)
	g.PUT("/resource_providers/:uuid/traits", since(1, 6, h.can(ruleProviderTraitsUpd, h.putProviderTraits)))
	g.DELETE("/resource_providers/:uuid/traits", since(1, 6, h.can(ruleProviderTraitsDel, h.deleteProviderTraits)))
}

// syncStandardTraits inserts the os-traits standard traits (package trait)
// that are missing, as Placement syncs os_traits into its table at start;
// idempotent and safe with several processes at once.
func syncStandardTraits(ctx context.Context, pool *pgxpool.Pool) error {
	return New(pool).TraitsSync(ctx, trait.Standard())
}

// traitURL is Placement's trait_url.
func traitURL(name string) string { return "/traits/" + name }

// errTraitNotFound is Placement's TraitNotFound as a 404.
func errTraitNotFound(name string) *web.PlacementError {
	return web.PlacementErr(http.StatusNotFound, "", "No such trait(s): %s.", name)
}

// traitModified is pick_last_modified for a trait.
func traitModified(created time.Time, updated *time.Time) time.Time {
	if updated != nil {
		return *updated
	}
	return created
}

// listTraits is GET /traits (1.6+), as Placement's list_traits: name=in:A,B
// (those names), name=startswith:P (that prefix; another operator filters
// nothing), associated=true|false (traits of some provider, or of none).
// A name without an operator, an associated other than true/false and
// unknown parameters are 400s.
func (h *Handler) listTraits(c echo.Context) error {
	q := c.QueryParams()
	if err := checkQueryParams(q, "name", "associated"); err != nil {
		return err
	}
	var params TraitListParams
	if _, ok := q["name"]; ok {
		val := lastValue(q, "name")
		op, arg, found := strings.Cut(val, ":")
		if !found {
			return web.PlacementErr(http.StatusBadRequest, "",
				"Badly formatted name parameter. Expected name query string parameter in form: ?name=[in|startswith]:[name1,name2|prefix]. Got: \"%s\"", val)
		}
		switch op {
		case "in":
			params.Names = strings.Split(arg, ",")
		case "startswith":
			params.Prefix = &arg
		}
	}
	if _, ok := q["associated"]; ok {
		var b bool
		switch strings.ToLower(lastValue(q, "associated")) {
		case "true":
			b = true
		case "false":
		default:
			return web.PlacementErr(http.StatusBadRequest, "",
				"The query parameter \"associated\" only accepts \"true\" or \"false\"")
		}
		params.Associated = &b
	}
	rows, err := h.q.TraitList(c.Request().Context(), params)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(rows))
	var last time.Time
	for _, r := range rows {
		if t := traitModified(r.CreatedAt, r.UpdatedAt); t.After(last) {
			last = t
		}
		names = append(names, r.Name)
	}
	if web.PlacementRequestVersion(c).AtLeast(1, 15) {
		setCacheHeaders(c, &last)
	}
	return c.JSON(http.StatusOK, map[string]any{"traits": names})
}

// getTrait is GET /traits/{name} (1.6+): 204 when it exists, 404
// otherwise.
func (h *Handler) getTrait(c echo.Context) error {
	name := c.Param("name")
	t, err := h.q.TraitByName(c.Request().Context(), name)
	if errors.Is(err, pgx.ErrNoRows) {
		return errTraitNotFound(name)
	} else if err != nil {
		return err
	}
	if web.PlacementRequestVersion(c).AtLeast(1, 15) {
		setCacheHeaders(c, &t.CreatedAt)
	}
	return c.NoContent(http.StatusNoContent)
}

// putTrait is PUT /traits/{name} (1.6+): creates a CUSTOM_ trait (201) or
// confirms it (204), with Location; any other name is 400.
func (h *Handler) putTrait(c echo.Context) error {
	ctx := c.Request().Context()
	name := c.Param("name")
	if !trait.IsCustom(name) {
		return web.PlacementErr(http.StatusBadRequest, "",
			"The trait is invalid. A valid trait must be no longer than 255 characters, start with the prefix \"CUSTOM_\" and use following characters: \"A\"-\"Z\", \"0\"-\"9\" and \"_\"")
	}
	status := http.StatusNoContent
	n, err := h.q.TraitInsert(ctx, name)
	if err != nil {
		return err
	}
	if n == 1 {
		status = http.StatusCreated
	}
	setLocation(c, traitURL(name))
	if web.PlacementRequestVersion(c).AtLeast(1, 15) {
		t, err := h.q.TraitByName(ctx, name)
		if err != nil {
			return err
		}
		setCacheHeaders(c, &t.CreatedAt)
	}
	return c.NoContent(status)
}

// deleteTrait is DELETE /traits/{name} (1.6+): 204; 404 when unknown; 400
// for a standard trait; 409 while a provider has it.
func (h *Handler) deleteTrait(c echo.Context) error {
	ctx := c.Request().Context()
	name := c.Param("name")
	inUse := web.PlacementErr(http.StatusConflict, "", "The trait %s is in use by a resource provider.", name)
	err := h.runTx(ctx, func(q *Queries) error {
		t, err := q.TraitByName(ctx, name)
		if errors.Is(err, pgx.ErrNoRows) {
			return errTraitNotFound(name)
		} else if err != nil {
			return err
		}
		if !strings.HasPrefix(name, trait.CustomPrefix) {
			return web.PlacementErr(http.StatusBadRequest, "", "Cannot delete standard trait %s.", name)
		}
		if used, err := q.TraitInUse(ctx, t.ID); err != nil {
			return err
		} else if used {
			return inUse
		}
		_, err = q.TraitDelete(ctx, t.ID)
		return err
	})
	if isFKViolation(err) {
		return inUse
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// providerTraitsJSON is the body of the provider traits handlers.
func providerTraitsJSON(names []string, generation int32) map[string]any {
	if names == nil {
		names = []string{}
	}
	return map[string]any{"traits": names, "resource_provider_generation": generation}
}

// getProviderTraits is GET /resource_providers/{uuid}/traits (1.6+): the
// provider's traits and generation.
func (h *Handler) getProviderTraits(c echo.Context) error {
	ctx := c.Request().Context()
	rp, err := h.providerFromPath(c, h.q)
	if err != nil {
		var pe *web.PlacementError
		if errors.As(err, &pe) && pe.Status == http.StatusNotFound {
			pe = web.PlacementErr(http.StatusNotFound, "", "No resource provider with uuid %s found: %s",
				c.Param("uuid"), pe.Detail)
			return pe
		}
		return err
	}
	names, err := h.q.ProviderTraitNames(ctx, rp.ID)
	if err != nil {
		return err
	}
	if web.PlacementRequestVersion(c).AtLeast(1, 15) {
		last, err := h.traitsModified(ctx, names)
		if err != nil {
			return err
		}
		setCacheHeaders(c, &last)
	}
	return c.JSON(http.StatusOK, providerTraitsJSON(names, rp.Generation))
}

// traitsModified is the newest timestamp of the named traits (now for
// none), as Placement's _serialize_traits.
func (h *Handler) traitsModified(ctx context.Context, names []string) (time.Time, error) {
	if len(names) == 0 {
		return time.Now(), nil
	}
	rows, err := h.q.TraitList(ctx, TraitListParams{Names: names})
	if err != nil {
		return time.Time{}, err
	}
	var last time.Time
	for _, r := range rows {
		if t := traitModified(r.CreatedAt, r.UpdatedAt); t.After(last) {
			last = t
		}
	}
	return last, nil
}

// setProviderTraitsSchema is Placement's SET_TRAITS_FOR_RP_SCHEMA.
var setProviderTraitsSchema = mustBodySchema("set_traits_for_rp", `{
	"type": "object",
	"properties": {
		"traits": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 255}},
		"resource_provider_generation": {"type": "integer"}
	},
	"required": ["traits", "resource_provider_generation"],
	"additionalProperties": false}`)

// putProviderTraits is PUT /resource_providers/{uuid}/traits (1.6+), as
// Placement's update_traits_for_resource_provider: the body's traits
// replace the provider's and its generation is incremented, in one
// transaction; a stale resource_provider_generation is 409
// placement.concurrent_update; unknown traits are 400 "No such trait ...".
func (h *Handler) putProviderTraits(c echo.Context) error {
	ctx := c.Request().Context()
	var in struct {
		Traits     []string `json:"traits"`
		Generation int32    `json:"resource_provider_generation"`
	}
	if _, err := readBody(c, setProviderTraitsSchema, &in); err != nil {
		return err
	}
	var names []string
	var gen int32
	err := h.runTx(ctx, func(q *Queries) error {
		rp, err := h.providerFromPathRaised(c, q)
		if err != nil {
			return err
		}
		if rp.Generation != in.Generation {
			return errGenerationChanged()
		}
		found, err := q.TraitsByNames(ctx, in.Traits)
		if err != nil {
			return err
		}
		have := map[string]int64{}
		for _, t := range found {
			have[t.Name] = t.ID
		}
		var missing []string
		ids := make([]int64, 0, len(found))
		seen := map[string]bool{}
		for _, n := range in.Traits {
			if seen[n] {
				continue
			}
			seen[n] = true
			if id, ok := have[n]; ok {
				ids = append(ids, id)
				names = append(names, n)
			} else {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return web.PlacementErr(http.StatusBadRequest, "", "No such trait %s", strings.Join(missing, ", "))
		}
		current, err := q.ProviderTraitNames(ctx, rp.ID)
		if err != nil {
			return err
		}
		if sameNames(current, names) {
			// Placement changes nothing, not even the generation, when
			// the set is the provider's already.
			gen = rp.Generation
			return nil
		}
		if err := bumpGeneration(ctx, q, rp.ID, rp.Generation); err != nil {
			return err
		}
		if err := q.ProviderTraitsClear(ctx, rp.ID); err != nil {
			return err
		}
		if err := q.ProviderTraitsAdd(ctx, ProviderTraitsAddParams{ID: rp.ID, TraitIds: ids}); err != nil {
			return err
		}
		gen = rp.Generation + 1
		return nil
	})
	if isFKViolation(err) {
		// A trait or the provider was deleted meanwhile.
		return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate, "Update conflict: %s", concurrentUpdateDetail)
	}
	if err != nil {
		return err
	}
	sort.Strings(names)
	if web.PlacementRequestVersion(c).AtLeast(1, 15) {
		last, err := h.traitsModified(ctx, names)
		if err != nil {
			return err
		}
		setCacheHeaders(c, &last)
	}
	return c.JSON(http.StatusOK, providerTraitsJSON(names, gen))
}

// sameNames reports whether a and b hold the same names (b has no
// duplicates).
func sameNames(a, b []string) bool {
	set := make(map[string]bool, len(a))
	for _, n := range a {
		set[n] = true
	}
	if len(set) != len(b) {
		return false
	}
	for _, n := range b {
		if !set[n] {
			return false
		}
	}
	return true
}

// errGenerationChanged is the 409 Placement answers when the body's
// resource_provider_generation is not the provider's.
func errGenerationChanged() *web.PlacementError {
	return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
		"Resource provider's generation already changed. Please update the generation and try again.")
}

// deleteProviderTraits is DELETE /resource_providers/{uuid}/traits (1.6+):
// the provider loses all its traits and its generation is incremented (left
// alone when it had none, as in Placement); 204.
func (h *Handler) deleteProviderTraits(c echo.Context) error {
	ctx := c.Request().Context()
	err := h.runTx(ctx, func(q *Queries) error {
		rp, err := h.providerFromPathRaised(c, q)
		if err != nil {
			return err
		}
		current, err := q.ProviderTraitNames(ctx, rp.ID)
		if err != nil || len(current) == 0 {
			// Nothing to remove: Placement leaves the generation alone.
			return err
		}
		if err := bumpGeneration(ctx, q, rp.ID, rp.Generation); err != nil {
			var pe *web.PlacementError
			if errors.As(err, &pe) {
				return web.PlacementErr(http.StatusConflict, web.PlacementCodeConcurrentUpdate,
					"Another thread concurrently updated the data. Please retry your update")
			}
			return err
		}
		return q.ProviderTraitsClear(ctx, rp.ID)
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
