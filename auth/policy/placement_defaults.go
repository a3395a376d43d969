// Code generated from the rules Placement 8.0 (placement.policies) registers; DO NOT EDIT by hand:
// regenerate when the compatibility target changes.

package policy

// PlacementDefaults returns Placement 8.0 (placement.policies)'s default access rules (name, check string, scope
// types, deprecated check string), the rules it enforces when no policy
// file overrides them.
func PlacementDefaults() []Default {
	return []Default{
		{Name: "admin_api", Check: "role:admin", ScopeTypes: []string{"system"}},
		{Name: "system_admin_api", Check: "role:admin and system_scope:all", DeprecatedCheck: "role:admin"},
		{Name: "system_reader_api", Check: "role:reader and system_scope:all", DeprecatedCheck: "role:admin"},
		{Name: "project_reader_api", Check: "role:reader and project_id:%(project_id)s", DeprecatedCheck: "role:admin"},
		{Name: "system_or_project_reader", Check: "rule:system_reader_api or rule:project_reader_api", DeprecatedCheck: "role:admin"},
		{Name: "placement:resource_providers:list", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:create", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:show", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:update", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:delete", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_classes:list", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_classes:create", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_classes:show", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_classes:update", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_classes:delete", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:inventories:list", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:inventories:create", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:inventories:show", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:inventories:update", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:inventories:delete", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:aggregates:list", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:aggregates:update", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:usages", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:usages", Check: "rule:system_or_project_reader", ScopeTypes: []string{"system", "project"}},
		{Name: "placement:traits:list", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:traits:show", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:traits:update", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:traits:delete", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:traits:list", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:traits:update", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:traits:delete", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:allocations:manage", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:allocations:list", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:allocations:update", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:allocations:delete", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
		{Name: "placement:resource_providers:allocations:list", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:allocation_candidates:list", Check: "rule:system_reader_api", ScopeTypes: []string{"system"}},
		{Name: "placement:reshaper:reshape", Check: "rule:system_admin_api", ScopeTypes: []string{"system"}},
	}
}
