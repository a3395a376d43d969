package deploytemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/trait"
	"github.com/metalloc/metalloc/web"
)

// stepInterfaces are the interfaces a deploy step may name (Ironic's
// DEPLOYING_INTERFACE_PRIORITY, in its order).
var stepInterfaces = []any{"power", "management", "deploy", "bios", "raid"}

// stepSchema is Ironic's DEPLOY_STEP_SCHEMA.
func stepSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"args":      map[string]any{"type": "object"},
			"interface": map[string]any{"type": "string", "enum": stepInterfaces},
			"priority": map[string]any{"anyOf": []any{
				map[string]any{"type": "integer", "minimum": 0},
				map[string]any{"type": "string", "minLength": 1, "pattern": "^[0-9]+$"},
			}},
			"step": map[string]any{"type": "string", "minLength": 1},
		},
		"required":             []any{"interface", "step", "args", "priority"},
		"additionalProperties": false,
	}
}

// mustSchema compiles a schema document built here.
func mustSchema(name string, doc map[string]any) *web.Schema {
	raw, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return web.MustSchema(name, raw)
}

var (
	// templateSchema is Ironic's TEMPLATE_SCHEMA: the name a trait
	// (TRAITS_SCHEMA), one step at least; description is accepted and, as
	// in Ironic 21.4, not stored.
	templateSchema = mustSchema("template", map[string]any{
		"type": "object",
		"properties": map[string]any{
			"description": map[string]any{"type": []any{"string", "null"}, "maxLength": 255},
			"extra":       map[string]any{"type": []any{"object", "null"}},
			"name":        trait.Schema(),
			"steps":       map[string]any{"type": "array", "items": stepSchema(), "minItems": 1},
			"uuid":        map[string]any{"type": []any{"string", "null"}},
		},
		"required":             []any{"steps", "name"},
		"additionalProperties": false,
	})
	oneStepSchema = mustSchema("step", stepSchema())
)

// HandlerOptions configures the deploy templates API (the rules: Ironic's
// baremetal:deploy_template:* defaults in keystone mode).
type HandlerOptions = web.ResourceOptions

// Handler serves Ironic's deploy templates API on a Store.
type Handler struct {
	store *Store
	opts  HandlerOptions
}

// NewHandler returns a Handler.
func NewHandler(store *Store, opts HandlerOptions) *Handler {
	return &Handler{store: store, opts: opts.WithDefaults()}
}

// Register mounts, on v1 (a group negotiating the Ironic microversion),
// from microversion 1.55 (below it GET is 404, anything else 405):
//
//	GET    /deploy_templates             list
//	POST   /deploy_templates             create (201)
//	GET    /deploy_templates/{ident}     show (uuid or name)
//	PATCH  /deploy_templates/{ident}     update (name, steps, extra)
//	DELETE /deploy_templates/{ident}     delete (204)
func (h *Handler) Register(v1 *echo.Group) {
	v1.GET("/deploy_templates", gate(h.list))
	v1.POST("/deploy_templates", gate(h.create))
	v1.GET("/deploy_templates/:ident", gate(h.get))
	v1.PATCH("/deploy_templates/:ident", gate(h.patch))
	v1.DELETE("/deploy_templates/:ident", gate(h.delete))
}

// gate hides the resource below 1.55 as Ironic's _route does.
var gate = web.GateResource(55, "deploy templates")

// httpErr maps the store's errors and node's argument errors to Ironic's
// answers about the template ident (or name).
func httpErr(err error, ident, name string) error {
	var ne *node.Error
	switch {
	case errors.Is(err, ErrNotFound):
		return web.NotFound("Deploy template %s could not be found.", ident)
	case errors.Is(err, ErrNameTaken):
		return web.Conflict("A deploy template with name %s already exists.", name)
	case errors.Is(err, ErrUUIDTaken):
		return web.Conflict("A deploy template with UUID %s already exists.", ident)
	case errors.As(err, &ne):
		return ne.HTTP()
	}
	return err
}

// render is Ironic's convert_with_links: step arguments that look secret
// are masked.
func (h *Handler) render(c echo.Context, t *Template, fields []string) (map[string]any, error) {
	steps := make([]map[string]any, len(t.Steps))
	for i, s := range t.Steps {
		args, _ := s["args"].(map[string]any)
		steps[i] = map[string]any{"interface": s["interface"], "step": s["step"], "args": node.MaskSecrets(args),
			"priority": s["priority"]}
	}
	doc := map[string]any{
		"uuid": t.UUID.String(), "name": t.Name, "extra": t.Extra, "steps": steps,
		"created_at": web.Timestamp(&t.CreatedAt), "updated_at": web.Timestamp(t.UpdatedAt),
		"links": web.ResourceLinks(h.opts.Base(c), "deploy_templates", t.UUID.String()),
	}
	return web.ProjectFields(doc, fields)
}

// identArg is args.uuid_or_name for the path's template_ident.
func identArg(c echo.Context) (string, error) {
	ident := web.PathIdent(c)
	if _, ok := web.UUIDLike(ident); !ok && !web.ValidLogicalName(ident, web.IronicMaxVersion) {
		return "", web.BadRequest("Expected UUID or name for template_ident: %s", ident)
	}
	return ident, nil
}

// list is GET /deploy_templates.
func (h *Handler) list(c echo.Context) error {
	detail, err := web.RecordListArgs(c, "marker", "limit", "sort_key", "sort_dir", "fields", "detail")
	if err != nil {
		return err
	}
	q := c.QueryParams()
	if q.Has("marker") && !web.ValidLogicalName(q.Get("marker"), web.IronicMaxVersion) {
		return web.BadRequest("Expected name for marker: %s", q.Get("marker"))
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:deploy_template:get"); err != nil {
		return err
	}
	fields, lp, err := web.RecordListPage(c, false, detail, []string{"uuid", "name"}, h.opts.MaxLimit,
		[]string{"extra", "steps"}, SortKeys)
	if err != nil {
		return err
	}
	page := db.Page{Limit: lp.Limit, SortKey: lp.SortKey, SortDesc: lp.SortDesc}
	if q.Has("marker") {
		// Ironic looks the marker up by uuid only.
		u, ok := web.UUIDLike(q.Get("marker"))
		if !ok {
			return web.NotFound("Deploy template %s could not be found.", q.Get("marker"))
		}
		page.Marker = &u
	}
	items, err := h.store.List(c.Request().Context(), page)
	if err != nil {
		return httpErr(err, q.Get("marker"), "")
	}
	return web.ListAnswer(c, h.opts.Base(c), "deploy_templates", "deploy_templates", lp.Limit, items,
		func(t *Template) (map[string]any, error) { return h.render(c, t, fields) },
		func(t *Template) string { return t.UUID.String() })
}

// get is GET /deploy_templates/{ident}.
func (h *Handler) get(c echo.Context) error {
	if err := node.CheckArgs(c, nil, "fields"); err != nil {
		return httpErr(err, "", "")
	}
	ident, err := identArg(c)
	if err != nil {
		return err
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:deploy_template:get"); err != nil {
		return err
	}
	fields, err := web.ParseFields(c)
	if err != nil {
		return err
	}
	t, err := h.store.Get(c.Request().Context(), ident)
	if err != nil {
		return httpErr(err, ident, "")
	}
	doc, err := h.render(c, &t, fields)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, doc)
}

// validate is TEMPLATE_VALIDATOR on a decoded template document (named
// name in schema errors): the schema, no duplicate steps, uuid a uuid. It
// fills t's name, steps (priorities as integers) and extra, and its uuid
// when given.
func validate(doc any, name string, t *Template) error {
	if err := templateSchema.Check(name, doc); err != nil {
		return err
	}
	m := doc.(map[string]any)
	steps := m["steps"].([]any)
	seen := map[string]int{}
	var dups []string
	t.Steps = make([]map[string]any, len(steps))
	for i, s := range steps {
		step := s.(map[string]any)
		key := fmt.Sprintf("interface: %s, step: %s", step["interface"], step["step"])
		if seen[key]++; seen[key] == 2 {
			dups = append(dups, key)
		}
		prio := step["priority"]
		if ps, ok := prio.(string); ok {
			n, _ := strconv.Atoi(ps)
			prio = n
		}
		t.Steps[i] = map[string]any{"interface": step["interface"], "step": step["step"], "args": step["args"], "priority": prio}
	}
	if len(dups) > 0 {
		slices.Sort(dups)
		return web.BadRequest("Deploy template invalid: Duplicate deploy steps. A deploy template cannot have multiple deploy steps with the same interface and step. Duplicates: %s.",
			strings.Join(dups, "; "))
	}
	if s, ok := m["uuid"].(string); ok {
		u, ok := web.UUIDLike(s)
		if !ok {
			return web.BadRequest("Expected UUID for uuid: %s", s)
		}
		t.UUID = u
	}
	t.Name = m["name"].(string)
	t.Extra, _ = m["extra"].(map[string]any)
	return nil
}

// create is POST /deploy_templates.
func (h *Handler) create(c echo.Context) error {
	if err := node.CheckArgs(c, nil); err != nil {
		return httpErr(err, "", "")
	}
	body, err := node.ReadBody(c)
	if err != nil {
		return httpErr(err, "", "")
	}
	if body == nil {
		body = map[string]any{}
	}
	var t Template
	if err := validate(body, "template", &t); err != nil {
		return err
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:deploy_template:create"); err != nil {
		return err
	}
	out, err := h.store.Create(c.Request().Context(), t)
	if err != nil {
		return httpErr(err, t.UUID.String(), t.Name)
	}
	resp, err := h.render(c, &out, nil)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, h.opts.Base(c)+"/v1/deploy_templates/"+out.UUID.String())
	return c.JSON(http.StatusCreated, resp)
}

// patch is PATCH /deploy_templates/{ident}: name, steps, extra (and
// description, accepted and not stored) may change.
func (h *Handler) patch(c echo.Context) error {
	if err := node.CheckArgs(c, nil); err != nil {
		return httpErr(err, "", "")
	}
	ident, err := identArg(c)
	if err != nil {
		return err
	}
	ops, err := node.ReadPatch(c)
	if err != nil {
		return httpErr(err, "", "")
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:deploy_template:update"); err != nil {
		return err
	}
	allowed := []string{"extra", "name", "steps", "description"}
	for _, op := range ops {
		if root := strings.Split(op.Path, "/")[1]; !slices.Contains(allowed, root) {
			return web.BadRequest("Cannot patch %s. Only the following can be updated: %s", op.Path, strings.Join(allowed, ", "))
		}
	}
	var name string
	out, err := h.store.Update(c.Request().Context(), ident, func(t *Template) error {
		steps := make([]any, len(t.Steps))
		for i, s := range t.Steps {
			steps[i] = s
		}
		doc, err := node.ApplyPatch(c.Request().Context(), map[string]any{"uuid": t.UUID.String(), "name": t.Name, "steps": steps, "extra": t.Extra}, ops)
		if err != nil {
			return err
		}
		if ss, ok := doc["steps"].([]any); ok {
			for _, s := range ss {
				if err := oneStepSchema.Check("patch", s); err != nil {
					return err
				}
			}
		}
		uuid := t.UUID
		if err := validate(doc, "patch", t); err != nil {
			return err
		}
		t.UUID, name = uuid, t.Name
		return nil
	})
	if err != nil {
		return httpErr(err, ident, name)
	}
	doc, err := h.render(c, &out, nil)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, doc)
}

// delete is DELETE /deploy_templates/{ident}.
func (h *Handler) delete(c echo.Context) error {
	if err := node.CheckArgs(c, nil); err != nil {
		return httpErr(err, "", "")
	}
	ident, err := identArg(c)
	if err != nil {
		return err
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:deploy_template:delete"); err != nil {
		return err
	}
	if err := h.store.Delete(c.Request().Context(), ident); err != nil {
		return httpErr(err, ident, "")
	}
	return c.NoContent(http.StatusNoContent)
}
