package placement

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/web"
)

// Access rule names, Placement 8.0's (placement/policies), one per route;
// each handler is wrapped in can with its rule where it is registered.
const (
	ruleProviderList        = "placement:resource_providers:list"
	ruleProviderCreate      = "placement:resource_providers:create"
	ruleProviderShow        = "placement:resource_providers:show"
	ruleProviderUpdate      = "placement:resource_providers:update"
	ruleProviderDelete      = "placement:resource_providers:delete"
	ruleAggregatesList      = "placement:resource_providers:aggregates:list"
	ruleAggregatesUpdate    = "placement:resource_providers:aggregates:update"
	ruleProviderAllocations = "placement:resource_providers:allocations:list"
	ruleAllocationsList     = "placement:allocations:list"
	ruleAllocationsManage   = "placement:allocations:manage"
	ruleAllocationsUpdate   = "placement:allocations:update"
	ruleAllocationsDelete   = "placement:allocations:delete"
	ruleCandidatesList      = "placement:allocation_candidates:list"
	ruleInventoriesList     = "placement:resource_providers:inventories:list"
	ruleInventoriesCreate   = "placement:resource_providers:inventories:create"
	ruleInventoriesShow     = "placement:resource_providers:inventories:show"
	ruleInventoriesUpdate   = "placement:resource_providers:inventories:update"
	ruleInventoriesDelete   = "placement:resource_providers:inventories:delete"
	ruleReshape             = "placement:reshaper:reshape"
	ruleClassesList         = "placement:resource_classes:list"
	ruleClassesCreate       = "placement:resource_classes:create"
	ruleClassesShow         = "placement:resource_classes:show"
	ruleClassesUpdate       = "placement:resource_classes:update"
	ruleClassesDelete       = "placement:resource_classes:delete"
	ruleTraitsList          = "placement:traits:list"
	ruleTraitsShow          = "placement:traits:show"
	ruleTraitsUpdate        = "placement:traits:update"
	ruleTraitsDelete        = "placement:traits:delete"
	ruleProviderTraitsList  = "placement:resource_providers:traits:list"
	ruleProviderTraitsUpd   = "placement:resource_providers:traits:update"
	ruleProviderTraitsDel   = "placement:resource_providers:traits:delete"
	ruleProviderUsages      = "placement:resource_providers:usages"
	ruleTotalUsages         = "placement:usages"
)

// isPublicPath reports whether the request is for the version document,
// which Placement serves without authentication, or for /metrics, which
// metalloc-placement serves without authentication as metalloc-api does.
func isPublicPath(c echo.Context) bool {
	p := c.Request().URL.Path
	return p == "/" || p == "" || p == "/metrics"
}

// authenticate is the Authenticator as echo middleware: every request but
// the version document and /metrics needs credentials; a refusal is Placement's
// authentication 401 (or 400/503), outside microversion negotiation.
func (h *Handler) authenticate() echo.MiddlewareFunc {
	return auth.Middleware(h.opts.Authenticator, isPublicPath, func(_ echo.Context, f *auth.Failure) error {
		return web.PlacementAuthFailure(f.Status, f.Message, f.Challenge)
	})
}

// can wraps next in the access check of rule with Placement's default
// target, the caller's own project and user; see canTarget.
func (h *Handler) can(rule string, next echo.HandlerFunc) echo.HandlerFunc {
	return h.canTarget(rule, nil, next)
}

// canTarget wraps next in the access check of rule on the target target
// builds (nil: {"project_id", "user_id"} of the caller, as Placement's
// context.can). A refusal is 403 "Policy does not allow <rule> to be
// performed.", raised past microversion negotiation like Placement's
// policy errors (version header, no Vary). It runs inside the route's
// microversion gate (since), as Placement checks policy in the handler.
func (h *Handler) canTarget(rule string, target func(echo.Context) map[string]string, next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		creds, _ := auth.FromContext(c.Request().Context())
		var t map[string]string
		if target != nil {
			t = target(c)
		} else {
			t = map[string]string{"project_id": creds.ProjectID, "user_id": creds.UserID}
		}
		if !h.opts.Authorizer.Allowed(rule, t, creds) {
			err := web.PlacementErr(http.StatusForbidden, "", "Policy does not allow %s to be performed.", rule)
			err.Raised = true
			return err
		}
		return next(c)
	}
}

// LegacyAdmin is Placement's legacy default rules in short (every rule is
// admin_api, "role:admin"), the Authorizer until one is configured.
type LegacyAdmin struct{}

// Allowed implements auth.Authorizer.
func (LegacyAdmin) Allowed(_ string, _ map[string]string, creds auth.Credentials) bool {
	return creds.HasRole("admin")
}
