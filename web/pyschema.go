package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// JSON Schema violations worded as python-jsonschema 4 words them, which is
// what Ironic's API puts in its 400s ("Schema error for node: 'x' is too
// long") and what clients (python-ironicclient's functional tests, scripts)
// match on. metalloc validates with github.com/santhosh-tekuri/jsonschema/v6;
// this file turns its errors into python-jsonschema's messages: the error
// best_match picks, and the root cause Ironic's args.schema appends when
// that error is an anyOf/oneOf.

// SchemaError is Ironic's args.schema message for err, a validation error
// of doc: "<best match>", plus ". Possible root cause: <cause>" when the
// best match is too generic (anyOf/oneOf). Errors that are not
// *jsonschema.ValidationError are shown as they are.
func SchemaError(err error, doc any) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	best := bestMatch(flatten(ve), doc)
	msg := describe(best, doc)
	var cause *jsonschema.ValidationError
	for cur := best; cur != nil && len(cur.Causes) > 0 && isWeak(cur); {
		cur = bestMatch(flattenAll(cur.Causes), doc)
		cause = cur
	}
	if cause != nil {
		msg += ". Possible root cause: " + describe(cause, doc)
	}
	return msg
}

// SchemaMessage is python-jsonschema's message of the error best_match
// picks for err (a validation error of doc), without a root cause: what
// ValidationError.message says (Ironic's RAID and other driver-side
// validations quote it).
func SchemaMessage(err error, doc any) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	return describe(bestMatch(flatten(ve), doc), doc)
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

// relevance orders errors as python-jsonschema's best_match does:
// shallower instance paths first, then errors that are not anyOf/oneOf,
// then errors whose subschema's type the instance does not match
// (by_relevance's key; best_match takes the maximum at the top and the
// minimum while it descends into anyOf/oneOf alternatives).
func relevance(e *jsonschema.ValidationError, doc any) [3]int {
	weak := 1
	if isWeak(e) {
		weak = 0
	}
	mismatch := 1
	if matchesType(e, doc) {
		mismatch = 0
	}
	return [3]int{-len(e.InstanceLocation), weak, mismatch}
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// matchesType is python-jsonschema's ValidationError._matches_type: the
// subschema the error comes from has a "type" the instance is of.
func matchesType(e *jsonschema.ValidationError, doc any) bool {
	if _, ok := e.ErrorKind.(*kind.Type); ok {
		return false
	}
	sub, ok := subschema(e.SchemaURL).(map[string]any)
	if !ok {
		return false
	}
	inst := ValueAt(doc, e.InstanceLocation)
	switch t := sub["type"].(type) {
	case string:
		return isType(inst, t)
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok && isType(inst, s) {
				return true
			}
		}
	}
	return false
}

// isType reports whether a decoded JSON value is of JSON Schema type t.
func isType(v any, t string) bool {
	switch t {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "number", "integer":
		var f float64
		switch x := v.(type) {
		case float64:
			f = x
		case json.Number:
			var err error
			if f, err = x.Float64(); err != nil {
				return false
			}
		case int, int64:
			return true
		default:
			return false
		}
		return t == "number" || f == math.Trunc(f)
	}
	return false
}

// bestMatchTop is best_match without the descent: the most relevant error,
// the first of equals.
func bestMatchTop(es []*jsonschema.ValidationError, doc any) *jsonschema.ValidationError {
	var best *jsonschema.ValidationError
	for _, e := range es {
		if best == nil || less(relevance(best, doc), relevance(e, doc)) {
			best = e
		}
	}
	return best
}

// bestMatch is python-jsonschema's best_match: the most relevant error, then
// down into anyOf/oneOf alternatives while one of them stands out.
func bestMatch(es []*jsonschema.ValidationError, doc any) *jsonschema.ValidationError {
	best := bestMatchTop(es, doc)
	for best != nil && isWeak(best) && len(best.Causes) > 0 {
		ctx := flattenAll(best.Causes)
		slices.SortStableFunc(ctx, func(a, b *jsonschema.ValidationError) int {
			ra, rb := relevance(a, doc), relevance(b, doc)
			switch {
			case less(ra, rb):
				return -1
			case less(rb, ra):
				return 1
			}
			return 0
		})
		if len(ctx) == 0 || (len(ctx) >= 2 && relevance(ctx[0], doc) == relevance(ctx[1], doc)) {
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
	inst := ValueAt(doc, e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		want := slices.Clone(k.Want)
		slices.SortFunc(want, func(a, b string) int { return slices.Index(typeOrder, a) - slices.Index(typeOrder, b) })
		parts := make([]string, len(want))
		for i, w := range want {
			parts[i] = PyStr(w)
		}
		return fmt.Sprintf("%s is not of type %s", PyRepr(inst), strings.Join(parts, ", "))
	case *kind.Required:
		if len(k.Missing) > 0 {
			return fmt.Sprintf("%s is a required property", PyStr(k.Missing[0]))
		}
	case *kind.Dependency:
		if len(k.Missing) > 0 {
			return fmt.Sprintf("%s is a dependency of %s", PyStr(k.Missing[0]), PyStr(k.Prop))
		}
	case *kind.AdditionalProperties:
		props := slices.Clone(k.Properties)
		slices.Sort(props)
		parts := make([]string, len(props))
		for i, p := range props {
			parts[i] = PyStr(p)
		}
		verb := "was"
		if len(parts) > 1 {
			verb = "were"
		}
		return fmt.Sprintf("Additional properties are not allowed (%s %s unexpected)", strings.Join(parts, ", "), verb)
	case *kind.MaxLength:
		return fmt.Sprintf("%s is too long", PyRepr(inst))
	case *kind.MinLength, *kind.MinItems:
		return fmt.Sprintf("%s is too short", PyRepr(inst))
	case *kind.MaxItems:
		return fmt.Sprintf("%s is too long", PyRepr(inst))
	case *kind.Enum:
		return fmt.Sprintf("%s is not one of %s", PyRepr(inst), PyRepr(k.Want))
	case *kind.Const:
		return fmt.Sprintf("%s was expected", PyRepr(k.Want))
	case *kind.Pattern:
		return fmt.Sprintf("%s does not match %s", PyRepr(inst), PyStr(k.Want))
	case *kind.Minimum:
		return fmt.Sprintf("%s is less than the minimum of %s", PyRepr(inst), k.Want.FloatString(0))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("%s is less than or equal to the minimum of %s", PyRepr(inst), k.Want.FloatString(0))
	case *kind.Maximum:
		return fmt.Sprintf("%s is greater than the maximum of %s", PyRepr(inst), k.Want.FloatString(0))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("%s is greater than or equal to the maximum of %s", PyRepr(inst), k.Want.FloatString(0))
	case *kind.AnyOf, *kind.OneOf:
		return fmt.Sprintf("%s is not valid under any of the given schemas", PyRepr(inst))
	}
	s := e.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return strings.TrimSpace(s)
}
