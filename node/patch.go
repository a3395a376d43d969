package node

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/metalloc/metalloc/web"
)

// applyPatch applies a JSON patch (already checked against
// schema/patch.json) to doc one operation at a time with
// github.com/evanphx/json-patch/v5, so a failure names the operation, as
// Ironic's apply_jsonpatch does. Adding a new attribute at the root is
// refused.
func applyPatch(doc map[string]any, ops []patchOp) (map[string]any, error) {
	for _, op := range ops {
		if op.Op == "add" && strings.Count(op.Path, "/") == 1 {
			if _, ok := doc[strings.TrimPrefix(op.Path, "/")]; !ok {
				return nil, invalidf("Adding a new attribute (%s) to the root of the resource is not allowed", op.Path)
			}
		}
	}
	cur, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding patch document: %w", err)
	}
	for _, op := range ops {
		fail := func(reason string) error {
			return invalidf("Couldn't apply patch '%s'. Reason: %s", web.PyRepr(op.raw), reason)
		}
		if _, hasValue := op.raw["value"]; !hasValue && op.Op != "remove" {
			return nil, fail("The operation does not contain a 'value' member")
		}
		var current any
		if err := json.Unmarshal(cur, &current); err != nil {
			return nil, fmt.Errorf("decoding patch document: %w", err)
		}
		if reason := pointerProblem(current, op); reason != "" {
			return nil, fail(reason)
		}
		one, err := json.Marshal([]map[string]any{op.raw})
		if err != nil {
			return nil, fail(err.Error())
		}
		p, err := jsonpatch.DecodePatch(one)
		if err != nil {
			return nil, fail(err.Error())
		}
		next, err := p.Apply(cur)
		if err != nil {
			return nil, fail(err.Error())
		}
		cur = next
	}
	var out map[string]any
	if err := json.Unmarshal(cur, &out); err != nil {
		return nil, fmt.Errorf("decoding patched document: %w", err)
	}
	return out, nil
}

// pointerProblem explains, in python-jsonpatch's words, why op's path does
// not resolve in doc ("" if it does).
func pointerProblem(doc any, op patchOp) string {
	parts := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
	cur := doc
	for i, raw := range parts {
		part := strings.ReplaceAll(strings.ReplaceAll(raw, "~1", "/"), "~0", "~")
		last := i == len(parts)-1
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[part]
			if !ok {
				if !last {
					return fmt.Sprintf("member '%s' not found in %s", part, web.PyRepr(c))
				}
				switch op.Op {
				case "remove":
					return fmt.Sprintf("can't remove a non-existent object '%s'", part)
				case "replace":
					return fmt.Sprintf("can't replace a non-existent object '%s'", part)
				}
				return ""
			}
			cur = v
		case []any:
			if last && op.Op == "add" && part == "-" {
				return ""
			}
			idx, err := strconv.Atoi(part)
			if err != nil {
				return fmt.Sprintf("'%s' is not a valid sequence index", part)
			}
			if idx < 0 || idx > len(c) || (idx == len(c) && !(last && op.Op == "add")) {
				if last && op.Op == "add" {
					return "can't insert outside of list"
				}
				return fmt.Sprintf("index '%s' is out of bounds", part)
			}
			if idx < len(c) {
				cur = c[idx]
			}
		default:
			return fmt.Sprintf("Document '%s' does not support indexing, only dictionaries and lists are supported.",
				pyReprPlain(c))
		}
	}
	return ""
}
