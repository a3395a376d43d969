package node

import (
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/auth"
	"github.com/metalloc/metalloc/web"
)

// Forbidden is Ironic's 403 for a refused access rule (HTTPForbidden).
func Forbidden(rule string) error {
	return web.Errorf(403, "Access was denied to the following resource: %s", rule)
}

// CheckRule is api_utils.check_policy for a rule on no particular object
// (the system's resources: chassis, drivers, deploy templates,
// conductors): 403 when the caller may not.
func CheckRule(c echo.Context, r auth.Rules, rule string) error {
	creds := auth.Caller(c.Request().Context())
	if !r.Allowed(rule, auth.Target(creds), creds) {
		return Forbidden(rule)
	}
	return nil
}

// NodeTarget is the access-rule target of a node owned by owner and
// leased to lessee, for creds (Ironic's check_owner_policy).
func NodeTarget(creds auth.Credentials, owner, lessee *string) map[string]string {
	return auth.Target(creds, "node.owner", deref(owner), "node.lessee", deref(lessee))
}

// CheckNode applies rules to node n for the request's caller, as Ironic's
// check_node_policy_and_retrieve: a caller who may not even
// baremetal:node:get it gets 404 "Node <ident> could not be found." (its
// existence is concealed), one who may see it but not perform a rule gets
// 403. Nothing is checked when the rules are open.
func CheckNode(c echo.Context, r auth.Rules, owner, lessee *string, ident string, rules ...string) error {
	if r.Open() {
		return nil
	}
	creds := auth.Caller(c.Request().Context())
	t := NodeTarget(creds, owner, lessee)
	if !r.Allowed("baremetal:node:get", t, creds) {
		return web.NotFound("Node %s could not be found.", ident)
	}
	for _, rule := range rules {
		if !r.Allowed(rule, t, creds) {
			return Forbidden(rule)
		}
	}
	return nil
}

// ListScope is Ironic's check_list_policy for object "node" or
// "allocation": a caller allowed baremetal:<object>:list_all sees
// everything (the owner filter it asked for, if any, stays); otherwise a
// project-scoped caller allowed baremetal:<object>:list sees only its own
// project (returned as the project to filter by), and asking for another
// owner, or having no project, is 403.
func ListScope(c echo.Context, r auth.Rules, object string, owner *string) (project *string, err error) {
	if r.Open() {
		return nil, nil
	}
	creds := auth.Caller(c.Request().Context())
	t := auth.Target(creds)
	if r.Allowed("baremetal:"+object+":list_all", t, creds) {
		return nil, nil
	}
	if creds.ProjectID == "" || (owner != nil && *owner != creds.ProjectID) {
		return nil, Forbidden("baremetal:" + object + ":list_all")
	}
	if !r.Allowed("baremetal:"+object+":list", t, creds) {
		return nil, Forbidden("baremetal:" + object + ":list")
	}
	p := creds.ProjectID
	return &p, nil
}

// patchRules are the access rules of a node PATCH document, one per
// path as Ironic's _authorize_patch_and_get_node chooses them;
// baremetal:node:update covers every other path (and an empty document).
func patchRules(paths []string) []string {
	prefixes := []struct{ prefix, rule string }{
		{"/instance_info", "baremetal:node:update_instance_info"},
		{"/extra", "baremetal:node:update_extra"},
		{"/driver_info", "baremetal:node:update:driver_info"},
		{"/properties", "baremetal:node:update:properties"},
		{"/chassis_uuid", "baremetal:node:update:chassis_uuid"},
		{"/instance_uuid", "baremetal:node:update:instance_uuid"},
		{"/lessee", "baremetal:node:update:lessee"},
		{"/owner", "baremetal:node:update:owner"},
		// who may take the node on demand: an owner-level decision.
		{"/reservable", "baremetal:node:update:owner"},
		{"/driver", "baremetal:node:update:driver_interfaces"},
		{"/network_data", "baremetal:node:update:network_data"},
		{"/conductor_group", "baremetal:node:update:conductor_group"},
		{"/name", "baremetal:node:update:name"},
		{"/retired", "baremetal:node:update:retired"},
		{"/shard", "baremetal:node:update:shard"},
	}
	var rules []string
	generic := false
	for _, p := range paths {
		rule := ""
		for _, pr := range prefixes {
			if strings.HasPrefix(p, pr.prefix) {
				rule = pr.rule
				break
			}
		}
		if rule == "" && strings.HasSuffix(p, "_interface") {
			rule = "baremetal:node:update:driver_interfaces"
		}
		if rule == "" {
			generic = true
		} else {
			rules = append(rules, rule)
		}
	}
	if generic || len(rules) == 0 {
		rules = append(rules, "baremetal:node:update")
	}
	return rules
}
