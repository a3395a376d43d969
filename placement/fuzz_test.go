package placement

import (
	"net/url"
	"testing"

	"github.com/metalloc/metalloc/web"
)

// FuzzCandidateQuery feeds arbitrary query strings to GET
// /allocation_candidates' parser (the microversion's query schema, then
// resources, required, member_of, in_tree, granular groups, group_policy
// and limit) and GET /resource_providers' filter, at the oldest and newest
// microversions. Nothing may panic. Run it longer with:
// go test ./placement -run '^$' -fuzz FuzzCandidateQuery -fuzztime 5m
func FuzzCandidateQuery(f *testing.F) {
	for _, s := range []string{
		"resources=VCPU:1,MEMORY_MB:512&required=HW_CPU_X86_AVX2,!CUSTOM_X&limit=5",
		"resources1=VCPU:1&required1=in:A,B&member_of1=in:9e2c9a41-5b6d-4f7e-8a9b-0c1d2e3f4a5b&group_policy=isolate",
		"resources_GPU=CUSTOM_GPU:2&same_subtree=_GPU,_CPU&root_required=!CUSTOM_Y",
		"resources=VCPU:-1", "resources=:", "resources=VCPU:99999999999999999999", "required=%00", "member_of=in:,,",
		"in_tree=x&limit=0", "resources=VCPU:1&resources=VCPU:2", "name=%27%20OR%201%3D1--&uuid=x",
	} {
		f.Add(s)
	}
	versions := []web.Version{web.PlacementMinVersion, {Major: 1, Minor: 25}, web.PlacementMaxVersion}
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw)
		for _, v := range versions {
			_, _ = parseCandRequest(raw, v)
			_, _ = parseProviderFilter(q, v)
		}
	})
}
