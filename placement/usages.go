package placement

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// Usages, as Placement 8.0's handlers/usage.py serves them:
//
//	GET /resource_providers/{uuid}/usages
//	GET /usages?project_id=&user_id=[&consumer_type=]   (1.9+, type 1.38+)
//
// registerUsages adds the routes of usages.
func (h *Handler) registerUsages(g *echo.Group) {
	g.GET("/resource_providers/:uuid/usages", h.can(ruleProviderUsages, h.getProviderUsages), checkAccept)
	g.GET("/usages", since(1, 9, h.canTarget(ruleTotalUsages, usagesTarget, h.getTotalUsages)), checkAccept)
}

// getProviderUsages is GET /resource_providers/{uuid}/usages: the usage of
// every class the provider has inventory of (0 when unused); 404 for an
// unknown provider; from 1.15 cache-control and last-modified (now).
func (h *Handler) getProviderUsages(c echo.Context) error {
	ctx := c.Request().Context()
	rp, err := h.pathProvider(c, h.q, "")
	if err != nil {
		var pe *web.PlacementError
		if errors.As(err, &pe) && pe.Status == http.StatusNotFound {
			return web.PlacementErr(http.StatusNotFound, "", "No resource provider with uuid %s found: %s",
				c.Param("uuid"), pe.Detail)
		}
		return err
	}
	rows, err := h.q.ProviderUsages(ctx, rp.ID)
	if err != nil {
		return err
	}
	usages := make(map[string]int64, len(rows))
	for _, r := range rows {
		usages[r.ResourceClass] = r.Usage
	}
	if web.PlacementRequestVersion(c).AtLeast(1, 15) {
		setCacheHeaders(c, nil)
	}
	return c.JSON(http.StatusOK, map[string]any{"resource_provider_generation": rp.Generation, "usages": usages})
}

// consumerTypeQueryRE is Placement's CONSUMER_TYPE_GET_PATTERN.
var consumerTypeQueryRE = regexp.MustCompile(`^[A-Z0-9_]+$|^all|^unknown$`)

// getTotalUsages is GET /usages (1.9+; 404 before): the project's (and
// optionally user's) usage summed by class. project_id is required and no
// other parameter than user_id (and consumer_type from 1.38) is allowed:
// 400 "Invalid query string parameters: ...". From 1.38 the usages are
// grouped by consumer type, each with its consumer_count; consumer_type
// "all" sums every type under "all", "unknown" the consumers without one.
func (h *Handler) getTotalUsages(c echo.Context) error {
	ctx := c.Request().Context()
	v := web.PlacementRequestVersion(c)
	if !v.AtLeast(1, 9) {
		return web.PlacementErr(http.StatusNotFound, "", "The resource could not be found.")
	}
	query := c.QueryParams()
	allowed := map[string]bool{"project_id": true, "user_id": true}
	if v.AtLeast(1, 38) {
		allowed["consumer_type"] = true
	}
	var extra []string
	for k := range query {
		if !allowed[k] {
			extra = append(extra, "'"+k+"'")
		}
	}
	bad := func(format string, args ...any) error {
		return web.PlacementErr(http.StatusBadRequest, "", "Invalid query string parameters: "+format, args...)
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		verb := "was"
		if len(extra) > 1 {
			verb = "were"
		}
		return bad("Additional properties are not allowed (%s %s unexpected)", strings.Join(extra, ", "), verb)
	}
	if _, ok := query["project_id"]; !ok {
		return bad("'project_id' is a required property")
	}
	get := func(k string) (*string, error) {
		vals, ok := query[k]
		if !ok {
			return nil, nil
		}
		s := vals[len(vals)-1]
		idSchema := map[string]any{"type": "string", "minLength": 1, "maxLength": 255}
		if s == "" {
			return nil, badQueryValue(web.PyRepr(s)+" is too short", "minLength", k, idSchema, s)
		}
		if len(s) > 255 {
			return nil, badQueryValue(web.PyRepr(s)+" is too long", "maxLength", k, idSchema, s)
		}
		return &s, nil
	}
	projectID, err := get("project_id")
	if err != nil {
		return err
	}
	userID, err := get("user_id")
	if err != nil {
		return err
	}
	consumerType, err := get("consumer_type")
	if err != nil {
		return err
	}
	if consumerType != nil && !consumerTypeQueryRE.MatchString(*consumerType) {
		return badQueryValue(fmt.Sprintf("%s does not match %s", web.PyRepr(*consumerType), web.PyRepr(consumerTypeQueryRE.String())),
			"pattern", "consumer_type", map[string]any{"type": "string", "pattern": consumerTypeQueryRE.String(),
				"minLength": 1, "maxLength": 255}, *consumerType)
	}

	var out map[string]any
	if !v.AtLeast(1, 38) {
		rows, err := h.q.ProjectUsages(ctx, ProjectUsagesParams{ProjectID: *projectID, UserID: userID})
		if err != nil {
			return err
		}
		usages := make(map[string]int64, len(rows))
		for _, r := range rows {
			usages[r.ResourceClass] = r.Usage
		}
		out = map[string]any{"usages": usages}
	} else {
		rows, err := h.q.ProjectUsagesByType(ctx, ProjectUsagesByTypeParams{ProjectID: *projectID, UserID: userID})
		if err != nil {
			return err
		}
		counts, err := h.q.ProjectConsumerCounts(ctx, ProjectConsumerCountsParams{ProjectID: *projectID, UserID: userID})
		if err != nil {
			return err
		}
		// group maps a consumer's type to the key it is shown under ("" to
		// leave it out).
		group := func(ct *string) string {
			switch {
			case consumerType == nil:
				return consumerTypeName(ct)
			case *consumerType == "all":
				return "all"
			case *consumerType == unknownConsumerType:
				if ct == nil {
					return unknownConsumerType
				}
				return ""
			case ct != nil && *ct == *consumerType:
				return *ct
			}
			return ""
		}
		usages := map[string]map[string]int64{}
		for _, r := range rows {
			k := group(r.ConsumerType)
			if k == "" {
				continue
			}
			if usages[k] == nil {
				usages[k] = map[string]int64{}
			}
			usages[k][r.ResourceClass] += r.Usage
		}
		for _, cnt := range counts {
			k := group(cnt.ConsumerType)
			if k != "" && usages[k] != nil {
				usages[k]["consumer_count"] += cnt.Consumers
			}
		}
		out = map[string]any{"usages": usages}
	}
	if v.AtLeast(1, 15) {
		setCacheHeaders(c, nil)
	}
	return c.JSON(http.StatusOK, out)
}

// usagesTarget is GET /usages' access-rule target: the project asked
// about, as Placement's (a project reader may read its own usages).
func usagesTarget(c echo.Context) map[string]string {
	return map[string]string{"project_id": c.QueryParam("project_id")}
}

// OverCapacity lists the inventories whose allocations use more than their
// capacity, which an inventory update may leave behind as in Placement 8.0
// (see Handler.noteOverCapacity); for "metalloc-manage status
// upgrade-check". Rows are by provider uuid, then class.
func OverCapacity(ctx context.Context, db DBTX) ([]OverCapacityRow, error) {
	return New(db).OverCapacity(ctx)
}
