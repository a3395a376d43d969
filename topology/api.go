package topology

import (
	_ "embed"
	"encoding/json"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/auth/policy"
	"github.com/metalloc/metalloc/node"
	"github.com/metalloc/metalloc/web"
)

// Access rules of the topology API (metalloc's own, named like Ironic's).
const (
	RuleGet    = "baremetal:topology:get"
	RuleUpdate = "baremetal:topology:update"
)

// PolicyDefaults are the default access rules of the topology API, to add
// to Ironic's (policy.IronicDefaults): reading it as GET /v1/conductors
// (system readers and the service role), replacing it as deleting a node
// (system administrators); a policy file may override both.
func PolicyDefaults() []policy.Default {
	return []policy.Default{
		{Name: RuleGet, Check: "(role:reader and system_scope:all) or (role:service and system_scope:all) or rule:service_role",
			ScopeTypes: []string{"system"}, DeprecatedCheck: "rule:is_admin or rule:is_observer"},
		{Name: RuleUpdate, Check: "role:admin and system_scope:all",
			ScopeTypes: []string{"system"}, DeprecatedCheck: "rule:is_admin"},
	}
}

var (
	//go:embed put_schema.json
	putSchemaJSON []byte
	putSchema     = web.MustSchema("topology", putSchemaJSON)
)

// Document is the body of GET /v1/topology and of PUT /v1/topology's
// request and response: the levels, coarse to fine.
type Document struct {
	Levels []Level `json:"levels"`
}

// HandlerOptions configures Handler.
type HandlerOptions struct {
	// Rules are the access rules (RuleGet, RuleUpdate in keystone mode;
	// open otherwise, as Ironic).
	Rules auth.Rules
}

// Handler serves the topology API, a metalloc extension
// (docs/api-compatibility.md):
//
//	GET /v1/topology  {"levels": [{"name": "rack", "source": "extra.rack"}]} (200)
//	PUT /v1/topology  the same body; replaces every level in one
//	                  transaction and answers the stored document (200)
//
// Invalid levels are 400 in Ironic's error body, saying what is wrong;
// other methods 405.
type Handler struct {
	pool *pgxpool.Pool
	opts HandlerOptions
}

// NewHandler returns the topology API on pool.
func NewHandler(pool *pgxpool.Pool, opts HandlerOptions) *Handler {
	return &Handler{pool: pool, opts: opts}
}

// Register adds the routes to v1 (the /v1 group).
func (h *Handler) Register(v1 *echo.Group) {
	v1.GET("/topology", h.get)
	v1.PUT("/topology", h.put)
	v1.Match([]string{http.MethodPost, http.MethodPatch, http.MethodDelete}, "/topology", func(echo.Context) error {
		return web.Errorf(http.StatusMethodNotAllowed, "The method is not allowed for the requested URL.")
	})
}

func (h *Handler) check(c echo.Context, rule string) error {
	r := h.opts.Rules
	if r.Open() {
		return nil
	}
	creds := auth.Caller(c.Request().Context())
	if !r.Allowed(rule, auth.Target(creds), creds) {
		return node.Forbidden(rule)
	}
	return nil
}

func (h *Handler) get(c echo.Context) error {
	if err := h.check(c, RuleGet); err != nil {
		return err
	}
	levels, err := Load(c.Request().Context(), h.pool)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, Document{Levels: nonNil(levels)})
}

func (h *Handler) put(c echo.Context) error {
	if err := h.check(c, RuleUpdate); err != nil {
		return err
	}
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return web.BadRequest("Could not read the request body: %v", err)
	}
	if _, err := putSchema.Decode(body); err != nil {
		return err
	}
	var doc Document
	if err := json.Unmarshal(body, &doc); err != nil {
		return web.BadRequest("Invalid topology: %v", err)
	}
	if err := ValidateLevels(doc.Levels); err != nil {
		return web.BadRequest("%s", err.Error())
	}
	if err := Save(c.Request().Context(), h.pool, doc.Levels); err != nil {
		return err
	}
	web.Logger(c).Info("topology replaced", zap.Stringers("levels", doc.Levels))
	return c.JSON(http.StatusOK, Document{Levels: nonNil(doc.Levels)})
}

func nonNil(levels []Level) []Level {
	if levels == nil {
		return []Level{}
	}
	return levels
}
