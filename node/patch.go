package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/metalloc/metalloc/web"
)

// MaxPatchOps is the most operations one JSON patch may carry (a
// metalloc limit; Ironic has none). Each operation costs a walk of its path
// under the row lock of the resource patched, so the limit bounds how long a
// single request can hold it; a patch beyond it is refused before anything
// is read (400, Ironic's error body). A thousand operations is more than any
// client sends: openstacksdk and `openstack baremetal node set` send one per
// field or key changed.
const MaxPatchOps = 1000

// checkPatchCtxEvery is how many operations applyPatch applies between two
// looks at its context.
const checkPatchCtxEvery = 64

// applyPatch applies a JSON patch (already checked against
// schema/patch.json) to a copy of doc, one operation at a time on the
// decoded document, so a failure names the operation, as Ironic's
// apply_jsonpatch does (RFC 6902 add, replace and remove; the reasons are
// python-jsonpatch's, see pointerProblem). Adding a new attribute at the
// root is refused. The cost is linear in the size of doc and ops (one
// encoding of each, then one walk of each operation's path): doc is not
// re-encoded per operation. applyPatch stops with ctx's error once ctx is
// done (the caller usually holds a row lock, which its transaction's
// rollback then releases).
func applyPatch(ctx context.Context, doc map[string]any, ops []patchOp) (map[string]any, error) {
	for _, op := range ops {
		if op.Op == "add" && strings.Count(op.Path, "/") == 1 {
			if _, ok := doc[strings.TrimPrefix(op.Path, "/")]; !ok {
				return nil, invalidf("Adding a new attribute (%s) to the root of the resource is not allowed", op.Path)
			}
		}
	}
	// One JSON round trip of the document and of every value: plain JSON
	// types (float64 numbers), and no value shared with the request or
	// with another operation.
	cur, err := jsonCopy[map[string]any](doc)
	if err != nil {
		return nil, fmt.Errorf("copying patch document: %w", err)
	}
	values := make([]any, len(ops))
	for i, op := range ops {
		values[i] = op.Value
	}
	if values, err = jsonCopy[[]any](values); err != nil {
		return nil, fmt.Errorf("copying patch values: %w", err)
	}
	for i, op := range ops {
		if i%checkPatchCtxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("applying patch: %w", err)
			}
		}
		fail := func(reason string) error {
			return invalidf("Couldn't apply patch '%s'. Reason: %s", web.PyRepr(op.raw), reason)
		}
		if _, hasValue := op.raw["value"]; !hasValue && op.Op != "remove" {
			return nil, fail("The operation does not contain a 'value' member")
		}
		if reason := pointerProblem(cur, op); reason != "" {
			return nil, fail(reason)
		}
		next, err := applyOp(cur, pointerParts(op.Path), op.Op, values[i])
		if err != nil {
			return nil, fail(err.Error())
		}
		cur = next.(map[string]any)
	}
	return cur, nil
}

// jsonCopy returns v encoded and decoded again as a T.
func jsonCopy[T any](v any) (T, error) {
	var out T
	b, err := json.Marshal(v)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(b, &out)
	return out, err
}

// pointerParts splits a JSON pointer ("/a/b") into its unescaped parts.
func pointerParts(path string) []string {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts
}

// applyOp applies one add, replace or remove at parts below node, whose
// path pointerProblem has already checked, and returns node as it is after
// (a list that grew or shrank is a new slice, stored by the caller).
func applyOp(node any, parts []string, op string, value any) (any, error) {
	part := parts[0]
	last := len(parts) == 1
	switch c := node.(type) {
	case map[string]any:
		if !last {
			child, err := applyOp(c[part], parts[1:], op, value)
			if err != nil {
				return nil, err
			}
			c[part] = child
			return c, nil
		}
		if op == "remove" {
			delete(c, part)
		} else {
			c[part] = value
		}
		return c, nil
	case []any:
		idx := len(c)
		if !(last && op == "add" && part == "-") {
			var err error
			if idx, err = strconv.Atoi(part); err != nil || idx < 0 || idx > len(c) {
				return nil, fmt.Errorf("index '%s' is out of bounds", part)
			}
		}
		if !last {
			child, err := applyOp(c[idx], parts[1:], op, value)
			if err != nil {
				return nil, err
			}
			c[idx] = child
			return c, nil
		}
		switch op {
		case "add":
			return slices.Insert(c, idx, value), nil
		case "remove":
			return slices.Delete(c, idx, idx+1), nil
		}
		c[idx] = value
		return c, nil
	}
	return nil, fmt.Errorf("document '%s' does not support indexing", pyReprPlain(node))
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
