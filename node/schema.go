package node

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/metalloc/metalloc/web"
)

// The JSON schemas request bodies are checked against (github.com/santhosh-
// tekuri/jsonschema/v6): schema/node.json for POST /v1/nodes (Ironic's
// node_schema), the same plus protected/protected_reason for a patched node,
// and schema/patch.json for the JSON patch document itself.
//
//go:embed schema/*.json
var schemaFS embed.FS

var (
	schemaOnce                                   sync.Once
	createSchema, patchedNodeSchema, patchSchema *jsonschema.Schema
	nodeSchemaProps                              map[string]bool
	schemaErr                                    error
)

func loadSchemas() error {
	schemaOnce.Do(func() {
		schemaErr = func() error {
			raw, err := schemaFS.ReadFile("schema/node.json")
			if err != nil {
				return err
			}
			create, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err != nil {
				return fmt.Errorf("node.json: %w", err)
			}
			patched, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err != nil {
				return err
			}
			props := patched.(map[string]any)["properties"].(map[string]any)
			props["protected"] = map[string]any{"type": []any{"string", "boolean", "null"}}
			props["protected_reason"] = map[string]any{"type": []any{"string", "null"}}
			nodeSchemaProps = map[string]bool{}
			for k := range props {
				nodeSchemaProps[k] = true
			}
			rawPatch, err := schemaFS.ReadFile("schema/patch.json")
			if err != nil {
				return err
			}
			patch, err := jsonschema.UnmarshalJSON(bytes.NewReader(rawPatch))
			if err != nil {
				return fmt.Errorf("patch.json: %w", err)
			}
			schs, err := web.CompileSchemas(map[string]any{"node.json": create, "patched-node.json": patched, "patch.json": patch})
			if err != nil {
				return err
			}
			createSchema, patchedNodeSchema, patchSchema = schs["node.json"], schs["patched-node.json"], schs["patch.json"]
			return nil
		}()
	})
	return schemaErr
}

// validateSchema checks doc against sch and returns Ironic's 400 message
// ("Schema error for <name>: <what python-jsonschema would say>").
func validateSchema(sch *jsonschema.Schema, name string, doc any) error {
	err := sch.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return invalidf("Schema error for %s: %v", name, err)
	}
	best := bestMatch(flatten(ve))
	msg := fmt.Sprintf("Schema error for %s: %s", name, describe(best, doc))
	var cause *jsonschema.ValidationError
	for cur := best; cur != nil && len(cur.Causes) > 0 && isWeak(cur); {
		cur = bestMatch(flattenAll(cur.Causes))
		cause = cur
	}
	if cause != nil {
		msg += ". Possible root cause: " + describe(cause, doc)
	}
	return invalidf("%s", msg)
}

// flatten returns the keyword errors under e, looking through the purely
// structural wrappers (the schema root, groups, references).
func flatten(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	switch e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.Reference:
		return flattenAll(e.Causes)
	}
	return []*jsonschema.ValidationError{e}
}

func flattenAll(es []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	var out []*jsonschema.ValidationError
	for _, c := range es {
		out = append(out, flatten(c)...)
	}
	return out
}

func isWeak(e *jsonschema.ValidationError) bool {
	switch e.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		return true
	}
	return false
}

// relevance orders errors as python-jsonschema's best_match does: shallower
// instance paths first, then errors that are not anyOf/oneOf.
func relevance(e *jsonschema.ValidationError) [2]int {
	weak := 1
	if isWeak(e) {
		weak = 0
	}
	return [2]int{-len(e.InstanceLocation), weak}
}

func less(a, b [2]int) bool { return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]) }

// bestMatchTop is best_match without the descent: the most relevant error,
// the first of equals.
func bestMatchTop(es []*jsonschema.ValidationError) *jsonschema.ValidationError {
	var best *jsonschema.ValidationError
	for _, e := range es {
		if best == nil || less(relevance(best), relevance(e)) {
			best = e
		}
	}
	return best
}

// bestMatch is python-jsonschema's best_match: the most relevant error, then
// down into anyOf/oneOf alternatives while one of them stands out.
func bestMatch(es []*jsonschema.ValidationError) *jsonschema.ValidationError {
	best := bestMatchTop(es)
	for best != nil && isWeak(best) && len(best.Causes) > 0 {
		ctx := flattenAll(best.Causes)
		slices.SortStableFunc(ctx, func(a, b *jsonschema.ValidationError) int {
			ra, rb := relevance(a), relevance(b)
			switch {
			case less(ra, rb):
				return -1
			case less(rb, ra):
				return 1
			}
			return 0
		})
		if len(ctx) >= 2 && relevance(ctx[0]) == relevance(ctx[1]) {
			return best
		}
		if len(ctx) == 0 {
			return best
		}
		best = ctx[0]
	}
	return best
}

// typeOrder is the order types are listed in our schemas (and so in
// python-jsonschema's messages).
var typeOrder = []string{"string", "boolean", "object", "array", "integer", "number", "null"}

// describe words one error as python-jsonschema 4 does.
func describe(e *jsonschema.ValidationError, doc any) string {
	inst := web.ValueAt(doc, e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		want := slices.Clone(k.Want)
		slices.SortFunc(want, func(a, b string) int { return slices.Index(typeOrder, a) - slices.Index(typeOrder, b) })
		parts := make([]string, len(want))
		for i, w := range want {
			parts[i] = web.PyStr(w)
		}
		return fmt.Sprintf("%s is not of type %s", web.PyRepr(inst), strings.Join(parts, ", "))
	case *kind.Required:
		if len(k.Missing) > 0 {
			return fmt.Sprintf("%s is a required property", web.PyStr(k.Missing[0]))
		}
	case *kind.AdditionalProperties:
		props := slices.Clone(k.Properties)
		slices.Sort(props)
		parts := make([]string, len(props))
		for i, p := range props {
			parts[i] = web.PyStr(p)
		}
		verb := "was"
		if len(parts) > 1 {
			verb = "were"
		}
		return fmt.Sprintf("Additional properties are not allowed (%s %s unexpected)", strings.Join(parts, ", "), verb)
	case *kind.MaxLength:
		return fmt.Sprintf("%s is too long", web.PyRepr(inst))
	case *kind.MinLength:
		return fmt.Sprintf("%s is too short", web.PyRepr(inst))
	case *kind.Enum:
		return fmt.Sprintf("%s is not one of %s", web.PyRepr(inst), web.PyRepr(k.Want))
	case *kind.Pattern:
		return fmt.Sprintf("%s does not match %s", web.PyRepr(inst), web.PyStr(k.Want))
	case *kind.AnyOf, *kind.OneOf:
		return fmt.Sprintf("%s is not valid under any of the given schemas", web.PyRepr(inst))
	}
	s := e.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return strings.TrimSpace(s)
}

// decodeJSON decodes a request body into generic JSON values (numbers as
// float64), rejecting trailing data.
func decodeJSON(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("unexpected data after the JSON document")
	}
	return v, nil
}
