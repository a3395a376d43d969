package web

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// PyRepr renders a decoded JSON value the way Python's repr() shows it, so
// that validation messages read like Ironic's and Placement's (which embed
// Python reprs):
// 'str', True/False/None, [1, 2], {'k': 'v'}.
func PyRepr(v any) string {
	var b strings.Builder
	writePyRepr(&b, v)
	return b.String()
}

func writePyRepr(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case string:
		b.WriteString(PyStr(x))
	case json.Number:
		b.WriteString(x.String())
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e16 {
			b.WriteString(strconv.FormatInt(int64(x), 10))
		} else {
			b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writePyRepr(b, e)
		}
		b.WriteByte(']')
	case []string:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(PyStr(e))
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(PyStr(k))
			b.WriteString(": ")
			writePyRepr(b, x[k])
		}
		b.WriteByte('}')
	default:
		fmt.Fprint(b, x)
	}
}

// PyStr quotes s as Python's repr of a str does: single quotes unless s
// contains a single quote and no double quote.
func PyStr(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// PyValidationError renders a JSON Schema violation the way
// python-jsonschema's str(ValidationError) does, the text Placement puts
// after "JSON does not validate: " and "Invalid query string parameters: "
// and that its clients and tests match on:
//
//	<msg>
//
//	Failed validating '<keyword>' in schema['properties']['total']:
//	    <sub-schema>
//
//	On instance['total']:
//	    <value>
//
// schemaPath is the path of the sub-schema holding keyword (without the
// keyword), instancePath that of the offending value (strings for object
// members, ints for array items).
func PyValidationError(msg, keyword string, schemaPath []string, subschema any, instancePath []any, value any) string {
	sp := make([]any, len(schemaPath))
	for i, s := range schemaPath {
		sp[i] = s
	}
	return fmt.Sprintf("%s\n\nFailed validating %s in %s:\n    %s\n\nOn %s:\n    %s",
		msg, PyStr(keyword), pyIndex("schema", sp), PyRepr(subschema), pyIndex("instance", instancePath), PyRepr(value))
}

// pyIndex is python-jsonschema's format_as_index: container['a'][0].
func pyIndex(container string, path []any) string {
	var b strings.Builder
	b.WriteString(container)
	for _, p := range path {
		b.WriteByte('[')
		writePyRepr(&b, p)
		b.WriteByte(']')
	}
	return b.String()
}
