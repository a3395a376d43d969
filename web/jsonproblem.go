package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// JSONProblem words a JSON decoding error for a client, in terms of the
// JSON document and never of Go's types (encoding/json says "cannot
// unmarshal number 1e400 into Go value of type float64"): "number 1e400 is
// out of range", "number 1.5 at count is not an integer in range",
// "expected a string at name, got number", or the syntax error as
// encoding/json words it ("invalid character 'x' looking for beginning of
// value", which names no Go type).
func JSONProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		at := ""
		if te.Field != "" {
			at = " at " + te.Field
		}
		want := jsonKind(te.Type)
		if strings.HasPrefix(te.Value, "number") && want == "number" {
			if k := te.Type.Kind(); k == reflect.Float32 || k == reflect.Float64 {
				return te.Value + at + " is out of range"
			}
			return te.Value + at + " is not an integer in range"
		}
		got, _, _ := strings.Cut(te.Value, " ")
		return fmt.Sprintf("expected %s%s, got %s", article(want), at, got)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind is the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return "value"
}

func article(kind string) string {
	switch kind {
	case "array", "object":
		return "an " + kind
	}
	return "a " + kind
}

// OutOfRangeNumber returns the first number in a decoded JSON document
// (json.Number leaves, as jsonschema.UnmarshalJSON and a decoder with
// UseNumber produce) that no float64 holds, such as 1e400, and where it is
// ("/extra/a"); ok is false when there is none. Python reads such a number
// as inf, which neither JSON nor PostgreSQL can store: metalloc refuses it
// up front.
func OutOfRangeNumber(doc any) (number, at string, ok bool) {
	switch v := doc.(type) {
	case json.Number:
		if _, err := strconv.ParseFloat(string(v), 64); err != nil {
			return string(v), "", true
		}
	case map[string]any:
		for k, e := range v {
			if n, at, ok := OutOfRangeNumber(e); ok {
				return n, "/" + k + at, true
			}
		}
	case []any:
		for i, e := range v {
			if n, at, ok := OutOfRangeNumber(e); ok {
				return n, "/" + strconv.Itoa(i) + at, true
			}
		}
	}
	return "", "", false
}
