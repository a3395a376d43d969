package web

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is a compiled JSON Schema for a request body.
type Schema struct {
	name string
	sch  *jsonschema.Schema
}

var (
	schemaMu sync.Mutex
	printer  = message.NewPrinter(language.English)
)

// MustSchema compiles src (a JSON Schema document) under name; it panics on a
// bad schema, which is a programming error caught by any test.
func MustSchema(name string, src []byte) *Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		panic(fmt.Sprintf("schema %s: %v", name, err))
	}
	url := "mem://" + name + ".json"
	schs, err := CompileSchemas(map[string]any{url: doc})
	if err != nil {
		panic(fmt.Sprintf("schema %s: %v", name, err))
	}
	return &Schema{name: name, sch: schs[url]}
}

// CompileSchemas compiles JSON Schema documents (decoded, keyed by the
// resource name others refer to them by) and returns each compiled, by the
// same name: the project's one JSON Schema compiler (draft 2020-12 unless a
// document says otherwise). With formats, format keywords are asserted and
// those formats added (as Placement's FormatChecker does).
func CompileSchemas(docs map[string]any, formats ...*jsonschema.Format) (map[string]*jsonschema.Schema, error) {
	schemaMu.Lock()
	defer schemaMu.Unlock()
	c := jsonschema.NewCompiler()
	if len(formats) > 0 {
		c.AssertFormat()
		for _, f := range formats {
			c.RegisterFormat(f)
		}
	}
	for name, doc := range docs {
		if err := c.AddResource(name, doc); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	out := make(map[string]*jsonschema.Schema, len(docs))
	for name := range docs {
		sch, err := c.Compile(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = sch
	}
	return out, nil
}

// Decode parses body as JSON and validates it against s. Malformed JSON, a
// number no float64 holds (1e400) and schema violations are a 400 *Error
// worded like Ironic's ("Schema error for <name>: <reason>"). It returns the decoded document
// (map[string]any for objects; numbers as json.Number).
func (s *Schema) Decode(body []byte) (any, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, BadRequest("Missing argument: \"%s\"", s.name)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return nil, BadRequest("Invalid JSON in request body: %s", JSONProblem(err))
	}
	if n, at, ok := OutOfRangeNumber(inst); ok {
		return nil, BadRequest("Invalid JSON in request body: number %s at %s is out of range", n, at)
	}
	if err := s.sch.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, BadRequest("Schema error for %s: %s", s.name, leafMessage(ve))
		}
		return nil, BadRequest("Schema error for %s: %v", s.name, err)
	}
	return inst, nil
}

// leafMessage picks the most specific cause of a validation error and says
// where it is: "/traits/0: value must be ...".
func leafMessage(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	msg := ve.ErrorKind.LocalizedString(printer)
	if len(ve.InstanceLocation) > 0 {
		return "/" + strings.Join(ve.InstanceLocation, "/") + ": " + msg
	}
	return msg
}

// ValueAt returns the value at a JSON instance location (a validation
// error's InstanceLocation) in a decoded document, nil if absent; for
// messages that quote the offending value as Ironic's and Placement's
// (python-jsonschema) do.
func ValueAt(doc any, path []string) any {
	cur := doc
	for _, p := range path {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}
