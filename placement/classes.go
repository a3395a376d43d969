package placement

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// registerClasses adds the routes of resource classes.
func (h *Handler) registerClasses(g *echo.Group) {
	g.GET("/resource_classes", since(1, 2, h.can(ruleClassesList, h.listResourceClasses)), checkAccept)
	g.POST("/resource_classes", since(1, 2, h.can(ruleClassesCreate, h.createResourceClass)))
	g.GET("/resource_classes/:name", since(1, 2, h.can(ruleClassesShow, h.getResourceClass)), checkAccept)
	g.PUT("/resource_classes/:name", since(1, 2, h.can(ruleClassesUpdate, h.putResourceClass)))
	g.DELETE("/resource_classes/:name", since(1, 2, h.can(ruleClassesDelete, h.deleteResourceClass)))
}

// firstCustomClassID is where CUSTOM_ resource class ids start (the
// sequence placement.custom_resource_class_id); below are the standard
// classes of os-resource-classes, as in Placement.
const firstCustomClassID = 10000

// since wraps a handler that exists from microversion major.minor: older
// requests get the 404 "The resource could not be found." that Placement's
// version_handler answers.
func since(major, minor int, next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !web.PlacementRequestVersion(c).AtLeast(major, minor) {
			return errVersionNotFound()
		}
		return next(c)
	}
}

// errVersionNotFound is the 404 of a route absent at the request's
// microversion.
func errVersionNotFound() *web.PlacementError {
	return web.PlacementErr(http.StatusNotFound, "", "The resource could not be found.")
}

// resourceClassID is the id of the resource class name. An unknown class is
// a 400 (placement.undefined_code) with Placement's ResourceClassNotFound
// detail "No such resource class <name>.", which is what inventory and
// allocation writes answer (wrapped in their own prefix: callers may replace
// the *web.PlacementError's Detail, e.g. "Unknown resource class in
// inventory for resource provider <uuid>: No such resource class X."). A
// GET of one inventory of an unknown class is a 404 in Placement: callers
// needing that check errors.As and change the status.
func resourceClassID(ctx context.Context, q *Queries, name string) (int32, error) {
	rc, err := q.ResourceClassByName(ctx, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, web.PlacementErr(http.StatusBadRequest, "", "No such resource class %s.", name)
	}
	if err != nil {
		return 0, err
	}
	return rc.ID, nil
}

// classFromName loads a class for the /resource_classes/{name}
// handlers: unknown is the 404 "No such resource class <name>.".
func classFromName(ctx context.Context, q *Queries, name string) (PlacementResourceClass, error) {
	rc, err := q.ResourceClassByName(ctx, name)
	if errors.Is(err, pgx.ErrNoRows) {
		// Placement lets this NotFound escape its handlers (no Vary).
		return rc, web.PlacementRaised(web.PlacementErr(http.StatusNotFound, "", "No such resource class %s.", name))
	}
	return rc, err
}

// resourceClassURL is Placement's resource_class_url.
func resourceClassURL(name string) string { return "/resource_classes/" + name }

// resourceClassJSON is Placement's _serialize_resource_class.
func resourceClassJSON(rc PlacementResourceClass) map[string]any {
	return map[string]any{
		"name":  rc.Name,
		"links": []map[string]string{{"rel": "self", "href": resourceClassURL(rc.Name)}},
	}
}

// classModified is pick_last_modified for a class.
func classModified(rc PlacementResourceClass) time.Time {
	if rc.UpdatedAt != nil {
		return *rc.UpdatedAt
	}
	return rc.CreatedAt
}

// customClassSchema is Placement's POST_RC_SCHEMA_V1_2 (also PUT before
// 1.7): a name matching ^CUSTOM_[A-Z0-9_]+$, at most 255 characters.
var customClassSchema = mustBodySchema("resource_class", `{
	"type": "object",
	"properties": {"name": {"type": "string", "pattern": "^CUSTOM_[A-Z0-9_]+$", "maxLength": 255}},
	"required": ["name"],
	"additionalProperties": false}`)

// listResourceClasses is GET /resource_classes (1.2+), standard and custom
// classes by id, with last-modified from 1.15.
func (h *Handler) listResourceClasses(c echo.Context) error {
	rcs, err := h.q.ResourceClassList(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(rcs))
	var last time.Time
	for _, rc := range rcs {
		if t := classModified(rc); t.After(last) {
			last = t
		}
		out = append(out, resourceClassJSON(rc))
	}
	if web.PlacementRequestVersion(c).AtLeast(1, 15) {
		setCacheHeaders(c, &last)
	}
	return c.JSON(http.StatusOK, map[string]any{"resource_classes": out})
}

// getResourceClass is GET /resource_classes/{name} (1.2+).
func (h *Handler) getResourceClass(c echo.Context) error {
	rc, err := classFromName(c.Request().Context(), h.q, c.Param("name"))
	if err != nil {
		return err
	}
	if web.PlacementRequestVersion(c).AtLeast(1, 15) {
		t := classModified(rc)
		setCacheHeaders(c, &t)
	}
	return c.JSON(http.StatusOK, resourceClassJSON(rc))
}

// createResourceClass is POST /resource_classes (1.2+): a CUSTOM_ name (400
// otherwise) gets the next custom id; 201 with Location and no body; a name
// taken is 409 "Conflicting resource class already exists: <name>".
func (h *Handler) createResourceClass(c echo.Context) error {
	var in struct {
		Name string `json:"name"`
	}
	if _, err := readBody(c, customClassSchema, &in); err != nil {
		return err
	}
	_, err := h.q.ResourceClassInsert(c.Request().Context(), in.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return web.PlacementErr(http.StatusConflict, "", "Conflicting resource class already exists: %s", in.Name)
	}
	if err != nil {
		return err
	}
	setLocation(c, resourceClassURL(in.Name))
	return c.NoContent(http.StatusCreated)
}

// putResourceClass is PUT /resource_classes/{name}. From 1.2 to 1.6 it
// renames a custom class to the body's name (200 with the class; 409
// "Resource class already exists: <name>"; 400 for a standard class); from
// 1.7 it takes no body and creates the custom class when missing (201) or
// confirms it (204), with Location; a non-CUSTOM_ name is 400.
func (h *Handler) putResourceClass(c echo.Context) error {
	ctx := c.Request().Context()
	name := c.Param("name")
	if web.PlacementRequestVersion(c).AtLeast(1, 7) {
		doc := map[string]any{"name": name}
		if err := customClassSchema.validate(doc); err != nil {
			return err
		}
		status := http.StatusNoContent
		if _, err := h.q.ResourceClassByName(ctx, name); errors.Is(err, pgx.ErrNoRows) {
			if _, err := h.q.ResourceClassInsert(ctx, name); err == nil {
				status = http.StatusCreated
			} else if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		} else if err != nil {
			return err
		}
		setLocation(c, resourceClassURL(name))
		return c.NoContent(status)
	}
	var in struct {
		Name string `json:"name"`
	}
	if _, err := readBody(c, customClassSchema, &in); err != nil {
		return err
	}
	var rc PlacementResourceClass
	err := h.runTx(ctx, func(q *Queries) error {
		old, err := classFromName(ctx, q, name)
		if err != nil {
			return err
		}
		if old.ID < firstCustomClassID {
			return web.PlacementErr(http.StatusBadRequest, "", "Cannot update standard resource class %s", name)
		}
		rc, err = q.ResourceClassRename(ctx, ResourceClassRenameParams{ID: old.ID, Name: in.Name})
		if isUniqueViolation(err) {
			return web.PlacementErr(http.StatusConflict, "", "Resource class already exists: %s", in.Name)
		}
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resourceClassJSON(rc))
}

// deleteResourceClass is DELETE /resource_classes/{name} (1.2+): 204; 404
// when unknown; 400 for a standard class; 409 while any inventory uses it
// ("Error in delete resource class: ...", as Placement).
func (h *Handler) deleteResourceClass(c echo.Context) error {
	ctx := c.Request().Context()
	name := c.Param("name")
	inUse := web.PlacementErr(http.StatusConflict, "",
		"Error in delete resource class: Cannot delete resource class %s. Class is in use in inventory.", name)
	err := h.runTx(ctx, func(q *Queries) error {
		rc, err := classFromName(ctx, q, name)
		if err != nil {
			return err
		}
		if rc.ID < firstCustomClassID {
			return web.PlacementErr(http.StatusBadRequest, "",
				"Error in delete resource class: Cannot delete standard resource class %s.", name)
		}
		if used, err := q.ResourceClassInUse(ctx, rc.ID); err != nil {
			return err
		} else if used {
			return inUse
		}
		_, err = q.ResourceClassDelete(ctx, rc.ID)
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
