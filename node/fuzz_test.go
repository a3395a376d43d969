package node

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/metalloc/metalloc/web"
)

// FuzzPatch feeds arbitrary bytes through the PATCH /v1/nodes/{ident}
// pipeline short of the database: JSON decoding, schema/patch.json and
// Ironic's _validate_patch (decodePatchOps), then the patch itself on a
// node (patchNode: json-patch, the patched-node schema, extra's limits,
// copying back). Nothing may panic, and a node the patch was accepted for
// still encodes as JSON. Seeds: valid and invalid patches. Run it longer
// with: go test ./node -run '^$' -fuzz FuzzPatch -fuzztime 5m
func FuzzPatch(f *testing.F) {
	for _, s := range []string{
		`[{"op":"add","path":"/extra/a","value":"b"}]`,
		`[{"op":"replace","path":"/name","value":"node-1"}]`,
		`[{"op":"remove","path":"/properties/cpus"}]`,
		`[{"op":"replace","path":"/properties","value":{"cpus":8,"memory_mb":1024}}]`,
		`[{"op":"move","from":"/extra/a","path":"/extra/b"}]`,
		`[{"op":"add","path":"/extra/~1x~0y","value":[1,2,{"a":null}]}]`,
		`[{"op":"replace","path":"/driver","value":"ipmi"}]`,
		`[{"op":"add","path":"/instance_info/image_source","value":"http://x/y"}]`,
		`[{"op":"test","path":"/maintenance","value":false}]`,
		`[{"op":"add","path":"/","value":{}}]`,
		`[{"op":"replace","path":"/extra","value":"\u0000\ud800"}]`,
		`{"op":"add"}`, `[]`, `[[]]`, `null`, `[{"op":"add","path":"extra"}]`,
	} {
		f.Add([]byte(s))
	}
	if err := loadSchemas(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		doc, err := decodeJSON(body)
		if err != nil {
			return
		}
		ops, err := decodePatchOps(doc, web.IronicMaxVersion, false)
		if err != nil {
			return
		}
		name, rc := "node-1", "gold"
		n := Node{UUID: uuid.New(), Name: &name, Driver: "fake-hardware", ResourceClass: &rc,
			ProvisionState: StateAvailable, Properties: map[string]any{"cpus": 8.0}, Extra: map[string]any{"a": "b"}}
		if err := patchNode(t.Context(), &n, web.IronicMaxVersion, "node-1", ops, false); err != nil {
			return
		}
		if _, err := json.Marshal(patchDocument(&n)); err != nil {
			t.Fatalf("patched node does not encode: %v", err)
		}
	})
}
