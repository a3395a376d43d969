package allocation

import (
	"encoding/json"
	"io"
	"slices"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// What the allocation and allocation group handlers share in reading a
// request (package allocgroup calls these with its own schemas and names).

// ReadBody reads the request body and validates it against schema: 400 in
// Ironic's format when it cannot be read or does not match.
func ReadBody(c echo.Context, schema *web.Schema) ([]byte, error) {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return nil, web.BadRequest("Could not read the request body: %v", err)
	}
	if _, err := schema.Decode(body); err != nil {
		return nil, err
	}
	return body, nil
}

// ReadPatchBody is ReadBody for a JSON patch (patch_schema.json: a list of
// add, replace and remove operations), the body of PATCH
// /v1/allocations/{ident} and /v1/allocation_groups/{ident}; ReadPatch
// then checks what it touches.
func ReadPatchBody(c echo.Context) ([]byte, error) {
	return ReadBody(c, patchSchema)
}

// DecodeBody is ReadBody, then the body decoded into v (a 400 "Invalid
// <what>: ..." when it does not decode).
func DecodeBody(c echo.Context, schema *web.Schema, what string, v any) error {
	body, err := ReadBody(c, schema)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return web.BadRequest("Invalid %s: %v", what, err)
	}
	return nil
}

// UniqueTraits returns requested traits without duplicates, in the order
// given. The request schemas have checked each (Ironic's TRAITS_SCHEMA,
// trait.Schema, so a bad one is worded as Ironic words it).
func UniqueTraits(traits []string) []string {
	return dedupe(traits)
}

// PatchOp is one operation of a JSON patch body, as the handlers check it
// before applying the patch.
type PatchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

// ReadPatch decodes a JSON patch body whose operations may touch only the
// top-level fields given (Ironic's 400 "Cannot patch <path>. Only the
// following can be updated: <fields>" otherwise), and returns its
// operations and the patch.
func ReadPatch(body []byte, fields ...string) ([]PatchOp, jsonpatch.Patch, error) {
	var ops []PatchOp
	if err := json.Unmarshal(body, &ops); err != nil {
		return nil, nil, web.BadRequest("Invalid patch: %v", err)
	}
	for _, op := range ops {
		field := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")[0]
		if !slices.Contains(fields, field) {
			return nil, nil, web.BadRequest("Cannot patch %s. Only the following can be updated: %s", op.Path,
				strings.Join(fields, ", "))
		}
	}
	patch, err := jsonpatch.DecodePatch(body)
	if err != nil {
		return nil, nil, web.BadRequest("Invalid patch: %v", err)
	}
	return ops, patch, nil
}

// ApplyPatch applies patch to doc (the patchable fields as a JSON object)
// and decodes the result into out: 400 when the patch does not apply or its
// result does not decode. An empty name in the result (out's Name, when it
// has one) is no name.
func ApplyPatch(patch jsonpatch.Patch, doc map[string]any, out any) error {
	raw, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		return web.BadRequest("Patch could not be applied: %v", err)
	}
	if err := json.Unmarshal(patched, out); err != nil {
		return web.BadRequest("Invalid patch result: %v", err)
	}
	return nil
}

// ExtraJSON is extra as stored: its JSON, {} when nil. A value that does
// not encode (it came from JSON, so none should) is a 400.
func ExtraJSON(extra map[string]any) (json.RawMessage, error) {
	if extra == nil {
		return json.RawMessage("{}"), nil
	}
	b, err := json.Marshal(extra)
	if err != nil {
		return nil, web.BadRequest("Invalid extra: %v", err)
	}
	return b, nil
}

// NoName is name with "" as no name (nil).
func NoName(name *string) *string {
	if name != nil && *name == "" {
		return nil
	}
	return name
}
