package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Schema is a compiled JSON Schema for a request body.
type Schema struct {
	name string
	sch  *jsonschema.Schema
}

var schemaMu sync.Mutex

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

// MustSchemaWith is MustSchema with edit applied to the decoded document
// first (to put in parts built in Go, such as trait.Schema()).
func MustSchemaWith(name string, src []byte, edit func(doc map[string]any)) *Schema {
	var doc map[string]any
	if err := json.Unmarshal(src, &doc); err != nil {
		panic(fmt.Sprintf("schema %s: %v", name, err))
	}
	edit(doc)
	raw, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("schema %s: %v", name, err))
	}
	return MustSchema(name, raw)
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
	for name, doc := range docs {
		sch, err := c.Compile(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = sch
		url, _, _ := strings.Cut(sch.Location, "#")
		schemaDocs.Store(url, doc)
	}
	return out, nil
}

// schemaDocs are the documents CompileSchemas compiled, by absolute URL:
// the subschemas a validation error points to (SchemaURL) are looked up in
// them when its message is worded (SchemaError).
var schemaDocs sync.Map

// subschema returns the (decoded) subschema at url, an absolute schema URL
// with a JSON pointer fragment; nil when unknown.
func subschema(url string) any {
	base, frag, _ := strings.Cut(url, "#")
	doc, ok := schemaDocs.Load(base)
	if !ok {
		return nil
	}
	var path []string
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		if tok == "" {
			continue
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if u, err := neturl.PathUnescape(tok); err == nil {
			tok = u
		}
		path = append(path, tok)
	}
	return ValueAt(doc, path)
}

// Decode parses body as JSON and validates it against s. Malformed JSON, a
// number no float64 holds (1e400) and schema violations are a 400 *Error
// worded like Ironic's ("Schema error for <name>: <reason>", the reason as
// python-jsonschema words it: SchemaError). It returns the decoded document
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
		return nil, BadRequest("Schema error for %s: %s", s.name, SchemaError(err, inst))
	}
	return inst, nil
}

// Check validates doc (a decoded document, e.g. a patched one) against s:
// a 400 *Error "Schema error for <name>: <reason>" (SchemaError) when it
// fails.
func (s *Schema) Check(name string, doc any) error {
	if err := s.sch.Validate(doc); err != nil {
		return BadRequest("Schema error for %s: %s", name, SchemaError(err, doc))
	}
	return nil
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
