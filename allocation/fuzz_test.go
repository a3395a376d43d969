package allocation

import (
	"encoding/json"
	"testing"

	"github.com/metalloc/metalloc/trait"
	"github.com/metalloc/metalloc/web"
)

// FuzzCreateBody feeds arbitrary bytes to the POST /v1/allocations
// decoder: the request schema (create_schema.json with Ironic's trait
// schema), decoding into createRequest, then the name check. Nothing may
// panic; a body the schema accepts must decode, with valid traits only.
// Run it longer with:
// go test ./allocation -run '^$' -fuzz FuzzCreateBody -fuzztime 5m
func FuzzCreateBody(f *testing.F) {
	for _, s := range []string{
		`{"resource_class":"gold"}`,
		`{"resource_class":"gold","traits":["CUSTOM_GPU","HW_CPU_X86_AVX2"],"name":"a-1","extra":{"x":[1,{"y":null}]}}`,
		`{"resource_class":"gold","candidate_nodes":["node-1","9e2c9a41-5b6d-4f7e-8a9b-0c1d2e3f4a5b"],"owner":"p"}`,
		`{"resource_class":"gold","uuid":"not-a-uuid"}`,
		`{"resource_class":1}`, `{"resource_class":"gold","traits":"CUSTOM_X"}`, `[]`, `null`, `{`,
		`{"resource_class":"\u0000","name":"\ud800"}`, `{"resource_class":"gold","consumer_type":"INSTANCE"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := createSchema.Decode(body); err != nil {
			return
		}
		var req createRequest
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatalf("schema accepted %q but it does not decode: %v", body, err)
		}
		if req.Name != nil {
			web.ValidLogicalName(*req.Name, web.IronicMaxVersion)
		}
		for _, tr := range req.Traits {
			if !trait.Valid(tr) {
				t.Fatalf("schema accepted the trait %q", tr)
			}
		}
	})
}
