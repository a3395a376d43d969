package chassis

import (
	_ "embed"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// schemaJSON is Ironic's CHASSIS_SCHEMA: a POST body, and a patched chassis.
//
//go:embed schema.json
var schemaJSON []byte

var schema = web.MustSchema("chassis", schemaJSON)

// HandlerOptions configures the chassis API (the rules: Ironic's
// baremetal:chassis:* defaults in keystone mode).
type HandlerOptions = web.ResourceOptions

// Handler serves Ironic's chassis API on a Store.
type Handler struct {
	store *Store
	opts  HandlerOptions
}

// NewHandler returns a Handler.
func NewHandler(store *Store, opts HandlerOptions) *Handler {
	return &Handler{store: store, opts: opts.WithDefaults()}
}

// Register mounts, on v1 (a group negotiating the Ironic microversion):
//
//	GET    /chassis, /chassis/detail   list
//	POST   /chassis                    create (201)
//	GET    /chassis/{uuid}             show
//	PATCH  /chassis/{uuid}             update (JSON patch of uuid, description, extra)
//	DELETE /chassis/{uuid}             delete (204; 400 while nodes name it)
//
// (/chassis/{uuid}/nodes is package node's.)
func (h *Handler) Register(v1 *echo.Group) {
	v1.GET("/chassis", h.list(false))
	v1.GET("/chassis/detail", h.list(true))
	v1.POST("/chassis", h.create)
	v1.GET("/chassis/:ident", h.get)
	v1.PATCH("/chassis/:ident", h.patch)
	v1.DELETE("/chassis/:ident", h.delete)
}

// httpErr maps the store's errors and node's argument errors to Ironic's
// answers about chassis id.
func httpErr(err error, id string) error {
	var ne *node.Error
	switch {
	case errors.Is(err, ErrNotFound):
		return web.NotFound("Chassis %s could not be found.", id)
	case errors.Is(err, ErrExists):
		return web.Conflict("A chassis with UUID %s already exists.", id)
	case errors.Is(err, ErrNotEmpty):
		return web.BadRequest("Cannot complete the requested action because chassis %s contains nodes.", id)
	case errors.As(err, &ne):
		return ne.HTTP()
	}
	return err
}

// render is Ironic's chassis convert_with_links. nodes is a list holding
// the list of links, as Ironic 21.4 shows it (a stray tuple in its code).
func (h *Handler) render(c echo.Context, ch *Chassis, fields []string) (map[string]any, error) {
	base := h.opts.Base(c)
	id := ch.UUID.String()
	var desc any
	if ch.Description != nil {
		desc = *ch.Description
	}
	doc := map[string]any{
		"uuid": id, "description": desc, "extra": ch.Extra,
		"created_at": web.Timestamp(&ch.CreatedAt), "updated_at": web.Timestamp(ch.UpdatedAt),
		"links": web.ResourceLinks(base, "chassis", id),
		"nodes": [][]web.Link{web.ResourceLinks(base, "chassis", id+"/nodes")},
	}
	return web.ProjectFields(doc, fields)
}

// uuidArg is Ironic's args.uuid for the path's chassis_uuid.
func uuidArg(c echo.Context) (uuid.UUID, error) {
	id := web.PathIdent(c)
	u, ok := web.UUIDLike(id)
	if !ok {
		return uuid.Nil, web.BadRequest("Expected UUID for chassis_uuid: %s", id)
	}
	return u, nil
}

// list is GET /chassis (detail false) and /chassis/detail.
func (h *Handler) list(detailPath bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		allowed := []string{"marker", "limit", "sort_key", "sort_dir"}
		if !detailPath {
			allowed = append(allowed, "fields", "detail")
		}
		detail, err := web.RecordListArgs(c, allowed...)
		if err != nil {
			return err
		}
		q := c.QueryParams()
		var marker *uuid.UUID
		if q.Has("marker") {
			u, ok := web.UUIDLike(q.Get("marker"))
			if !ok {
				return web.BadRequest("Expected UUID for marker: %s", q.Get("marker"))
			}
			marker = &u
		}
		if err := node.CheckRule(c, h.opts.Rules, "baremetal:chassis:get"); err != nil {
			return err
		}
		fields, lp, err := web.RecordListPage(c, detailPath, detail, []string{"uuid", "description"}, h.opts.MaxLimit,
			[]string{"extra"}, SortKeys)
		if err != nil {
			return err
		}
		items, err := h.store.List(c.Request().Context(), db.Page{Limit: lp.Limit, Marker: marker,
			SortKey: lp.SortKey, SortDesc: lp.SortDesc})
		if err != nil {
			return httpErr(err, q.Get("marker"))
		}
		resource := "chassis"
		if detailPath {
			resource += "/detail"
		}
		return web.ListAnswer(c, h.opts.Base(c), "chassis", resource, lp.Limit, items,
			func(ch *Chassis) (map[string]any, error) { return h.render(c, ch, fields) },
			func(ch *Chassis) string { return ch.UUID.String() })
	}
}

// get is GET /chassis/{uuid}.
func (h *Handler) get(c echo.Context) error {
	if err := node.CheckArgs(c, nil, "fields"); err != nil {
		return httpErr(err, "")
	}
	id, err := uuidArg(c)
	if err != nil {
		return err
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:chassis:get"); err != nil {
		return err
	}
	fields, err := web.ParseFields(c)
	if err != nil {
		return err
	}
	ch, err := h.store.Get(c.Request().Context(), id)
	if err != nil {
		return httpErr(err, id.String())
	}
	doc, err := h.render(c, &ch, fields)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, doc)
}

// fromDoc fills the stored fields of ch from a valid chassis document.
func fromDoc(ch *Chassis, doc map[string]any) {
	ch.Description = nil
	if s, ok := doc["description"].(string); ok {
		ch.Description = &s
	}
	ch.Extra, _ = doc["extra"].(map[string]any)
	if s, ok := doc["uuid"].(string); ok && s != "" {
		ch.UUID, _ = web.UUIDLike(s)
	}
}

// validate is CHASSIS_VALIDATOR: the schema, then uuid as args.uuid.
func validate(doc any, name string) (map[string]any, error) {
	if err := schema.Check(name, doc); err != nil {
		return nil, err
	}
	m := doc.(map[string]any)
	if s, ok := m["uuid"].(string); ok {
		if _, ok := web.UUIDLike(s); !ok {
			return nil, web.BadRequest("Expected UUID for uuid: %s", s)
		}
	}
	return m, nil
}

// create is POST /chassis (an empty body makes a chassis of defaults, as
// in Ironic).
func (h *Handler) create(c echo.Context) error {
	if err := node.CheckArgs(c, nil); err != nil {
		return httpErr(err, "")
	}
	body, err := node.ReadBody(c)
	if err != nil {
		return httpErr(err, "")
	}
	if body == nil {
		body = map[string]any{}
	}
	doc, err := validate(body, "chassis")
	if err != nil {
		return err
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:chassis:create"); err != nil {
		return err
	}
	var ch Chassis
	fromDoc(&ch, doc)
	out, err := h.store.Create(c.Request().Context(), ch)
	if err != nil {
		return httpErr(err, ch.UUID.String())
	}
	resp, err := h.render(c, &out, nil)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, h.opts.Base(c)+"/v1/chassis/"+out.UUID.String())
	return c.JSON(http.StatusCreated, resp)
}

// patch is PATCH /chassis/{uuid}: uuid, description and extra may change.
func (h *Handler) patch(c echo.Context) error {
	if err := node.CheckArgs(c, nil); err != nil {
		return httpErr(err, "")
	}
	ident := web.PathIdent(c)
	ops, err := node.ReadPatch(c)
	if err != nil {
		return httpErr(err, "")
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:chassis:update"); err != nil {
		return err
	}
	allowed := []string{"uuid", "extra", "description"}
	for _, op := range ops {
		if root := strings.Split(op.Path, "/")[1]; !slices.Contains(allowed, root) {
			return web.BadRequest("Cannot patch %s. Only the following can be updated: %s", op.Path, strings.Join(allowed, ", "))
		}
	}
	id, ok := web.UUIDLike(ident)
	if !ok {
		return web.NotFound("Chassis %s could not be found.", ident)
	}
	out, err := h.store.Update(c.Request().Context(), id, func(ch *Chassis) error {
		var desc any
		if ch.Description != nil {
			desc = *ch.Description
		}
		patched, err := node.ApplyPatch(c.Request().Context(), map[string]any{"uuid": ch.UUID.String(), "description": desc, "extra": ch.Extra}, ops)
		if err != nil {
			return err
		}
		doc, err := validate(patched, "patch")
		if err != nil {
			return err
		}
		fromDoc(ch, doc)
		return nil
	})
	if err != nil {
		return httpErr(err, ident)
	}
	doc, err := h.render(c, &out, nil)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, doc)
}

// delete is DELETE /chassis/{uuid}.
func (h *Handler) delete(c echo.Context) error {
	if err := node.CheckArgs(c, nil); err != nil {
		return httpErr(err, "")
	}
	id, err := uuidArg(c)
	if err != nil {
		return err
	}
	if err := node.CheckRule(c, h.opts.Rules, "baremetal:chassis:delete"); err != nil {
		return err
	}
	if err := h.store.Delete(c.Request().Context(), id); err != nil {
		return httpErr(err, id.String())
	}
	return c.NoContent(http.StatusNoContent)
}
