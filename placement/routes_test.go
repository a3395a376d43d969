package placement_test

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/auth/policy"
	"github.com/metalloc/metalloc/placement"
	"github.com/metalloc/metalloc/placement/placementtest"
)

// placementPersona is a caller as Placement's noauth2 sees it (the token
// "user[:project]", X-Roles, OpenStack-System-Scope), as its upstream
// suite drives roles; anonymous sends no token.
type placementPersona struct {
	name, token, roles string
	system             bool
}

var placementPersonas = []placementPersona{
	{name: "legacy-admin", token: "admin"}, // noauth2's admin: role admin, project "admin"
	{name: "system-admin", token: "sa", roles: "admin,member,reader", system: true},
	{name: "system-reader", token: "sr", roles: "reader", system: true},
	{name: "project-reader", token: "alice:proj-a", roles: "member,reader"},
	{name: "other-project", token: "bob:proj-b", roles: "member,reader"},
	{name: "service", token: "nova:service", roles: "service"},
	{name: "anonymous"},
}

// Which of Placement 8.0's base rules a route's access rule comes down to.
const (
	sysReader = "system_reader_api"        // role:reader and system_scope:all
	sysAdmin  = "system_admin_api"         // role:admin and system_scope:all
	usages    = "system_or_project_reader" // ... or role:reader and project_id:%(project_id)s
)

// allowedBy is who passes each base rule, per configuration: legacy
// (Placement 8.0's defaults: deprecated "role:admin" also passes, scope not
// checked) and secure RBAC (enforce_scope and enforce_new_defaults).
var allowedBy = map[bool]map[string][]string{
	false: {
		sysReader: {"legacy-admin", "system-admin", "system-reader"},
		sysAdmin:  {"legacy-admin", "system-admin"},
		usages:    {"legacy-admin", "system-admin", "system-reader", "project-reader"},
	},
	true: {
		sysReader: {"system-admin", "system-reader"},
		sysAdmin:  {"system-admin"},
		usages:    {"system-admin", "system-reader", "project-reader"},
	},
}

// TestPlacementRouteRoleTable sends every route of metalloc-placement as
// each persona, with Placement's default rules in both modes, and checks
// who gets past authorization: the rule each route uses (its row) decides,
// as Placement's policy defaults do; the others get 403 in Placement's
// error body, and no token is 401. Every registered route must have a row.
func TestPlacementRouteRoleTable(t *testing.T) {
	rp := "11111111-2222-3333-4444-555555555555"
	consumer := "99999999-2222-3333-4444-555555555555"
	rows := []struct{ method, path, body, rule string }{
		{"GET", "/resource_providers", "", sysReader},
		{"POST", "/resource_providers", `{"name":"rp-%s"}`, sysAdmin},
		{"GET", "/resource_providers/" + rp, "", sysReader},
		{"PUT", "/resource_providers/" + rp, `{"name":"rp-%s"}`, sysAdmin},
		{"DELETE", "/resource_providers/" + rp, "", sysAdmin},
		{"GET", "/resource_providers/" + rp + "/aggregates", "", sysReader},
		{"PUT", "/resource_providers/" + rp + "/aggregates", `{"aggregates":[],"resource_provider_generation":0}`, sysAdmin},
		{"GET", "/resource_providers/" + rp + "/allocations", "", sysReader},
		{"GET", "/resource_providers/" + rp + "/inventories", "", sysReader},
		{"POST", "/resource_providers/" + rp + "/inventories", `{"resource_class":"VCPU","total":1}`, sysAdmin},
		{"PUT", "/resource_providers/" + rp + "/inventories", `{"inventories":{},"resource_provider_generation":0}`, sysAdmin},
		{"DELETE", "/resource_providers/" + rp + "/inventories", "", sysAdmin},
		{"GET", "/resource_providers/" + rp + "/inventories/VCPU", "", sysReader},
		{"PUT", "/resource_providers/" + rp + "/inventories/VCPU", `{"total":1,"resource_provider_generation":0}`, sysAdmin},
		{"DELETE", "/resource_providers/" + rp + "/inventories/VCPU", "", sysAdmin},
		{"GET", "/resource_providers/" + rp + "/traits", "", sysReader},
		{"PUT", "/resource_providers/" + rp + "/traits", `{"traits":[],"resource_provider_generation":0}`, sysAdmin},
		{"DELETE", "/resource_providers/" + rp + "/traits", "", sysAdmin},
		{"GET", "/resource_providers/" + rp + "/usages", "", sysReader},
		{"GET", "/allocation_candidates?resources=VCPU:1", "", sysReader},
		{"POST", "/allocations", `{}`, sysAdmin},
		{"GET", "/allocations/" + consumer, "", sysReader},
		{"PUT", "/allocations/" + consumer, `{"allocations":{},"project_id":"p","user_id":"u","consumer_generation":null,"consumer_type":"INSTANCE"}`, sysAdmin},
		{"DELETE", "/allocations/" + consumer, "", sysAdmin},
		{"POST", "/reshaper", `{"inventories":{},"allocations":{}}`, sysAdmin},
		{"GET", "/resource_classes", "", sysReader},
		{"POST", "/resource_classes", `{"name":"CUSTOM_RC_%s"}`, sysAdmin},
		{"GET", "/resource_classes/VCPU", "", sysReader},
		{"PUT", "/resource_classes/CUSTOM_RC_%s", "", sysAdmin},
		{"DELETE", "/resource_classes/CUSTOM_NOPE", "", sysAdmin},
		{"GET", "/traits", "", sysReader},
		{"GET", "/traits/HW_CPU_X86_AVX", "", sysReader},
		{"PUT", "/traits/CUSTOM_T_%s", "", sysAdmin},
		{"DELETE", "/traits/CUSTOM_NOPE", "", sysAdmin},
		{"GET", "/usages?project_id=proj-a", "", usages},
	}
	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("secure_rbac=%v", secure), func(t *testing.T) {
			t.Parallel()
			authz, err := policy.New(policy.PlacementDefaults(), policy.Options{EnforceScope: secure, EnforceNewDefaults: secure})
			require.NoError(t, err)
			srv, _ := placementtest.NewServer(t, placement.Options{Authorizer: authz})

			// Every registered route has a row.
			e := echo.New()
			placement.NewHandler(nil, placement.Options{}).Register(e)
			covered := map[string]bool{"GET /": true}
			for _, r := range rows {
				covered[r.method+" "+placementPattern(r.path)] = true
			}
			var missing []string
			for _, r := range e.Routes() {
				if k := r.Method + " " + r.Path; !covered[k] && r.Method != "echo_route_not_found" {
					missing = append(missing, k)
				}
			}
			sort.Strings(missing)
			require.Empty(t, missing, "routes without a row")

			var diffs []string
			for i, r := range rows {
				for _, p := range placementPersonas {
					n := fmt.Sprintf("%d%s", i, strings.ReplaceAll(p.name, "-", ""))
					path, body := strings.ReplaceAll(r.path, "%s", strings.ToUpper(n)), r.body
					if strings.Contains(body, "%s") {
						body = fmt.Sprintf(body, strings.ToUpper(n))
					}
					req, err := http.NewRequest(r.method, srv.URL+path, strings.NewReader(body))
					require.NoError(t, err)
					req.Header.Set("OpenStack-API-Version", "placement 1.39")
					if body != "" {
						req.Header.Set("Content-Type", "application/json")
					}
					if p.token != "" {
						req.Header.Set("X-Auth-Token", p.token)
					}
					if p.roles != "" {
						req.Header.Set("X-Roles", p.roles)
					}
					if p.system {
						req.Header.Set("OpenStack-System-Scope", "all")
					}
					resp, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					raw, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					allowed := false
					for _, who := range allowedBy[secure][r.rule] {
						allowed = allowed || who == p.name
					}
					got := resp.StatusCode
					bad := false
					switch {
					case p.token == "":
						bad = got != http.StatusUnauthorized
					case allowed:
						bad = got == http.StatusUnauthorized || got == http.StatusForbidden || got >= 500
					default:
						bad = got != http.StatusForbidden || !strings.Contains(string(raw), `"placement.`) && !strings.Contains(string(raw), `"errors"`)
					}
					if bad {
						diffs = append(diffs, fmt.Sprintf("%s %s as %s (allowed=%v): %d %.160s", r.method, path, p.name, allowed, got, raw))
					}
				}
			}
			require.Empty(t, diffs, "\n%s", strings.Join(diffs, "\n"))
		})
	}
}

// placementPattern turns a row's path into echo's route pattern.
func placementPattern(path string) string {
	path, _, _ = strings.Cut(path, "?")
	parts := strings.Split(path, "/")
	names := map[string][]string{
		"resource_providers": {":uuid", "", ":resource_class"},
		"allocations":        {":consumer_uuid"},
		"resource_classes":   {":name"},
		"traits":             {":name"},
	}
	if len(parts) > 2 {
		if n, ok := names[parts[1]]; ok {
			parts[2] = n[0]
			if len(parts) > 4 && parts[1] == "resource_providers" {
				parts[4] = n[2]
			}
		}
	}
	return strings.Join(parts, "/")
}
