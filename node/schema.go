package node

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/metalloc/metalloc/web"
)

// The JSON schemas request bodies are checked against (github.com/santhosh-
// tekuri/jsonschema/v6): schema/node.json for POST /v1/nodes (Ironic's
// node_schema), the same plus protected/protected_reason for a patched node,
// schema/patch.json for the JSON patch document itself, and schema/vif.json
// for POST /v1/nodes/{ident}/vifs (Ironic's VIF_VALIDATOR).
//
//go:embed schema/*.json
var schemaFS embed.FS

var (
	schemaOnce                                              sync.Once
	createSchema, patchedNodeSchema, patchSchema, vifSchema *jsonschema.Schema
	nodeSchemaProps                                         map[string]bool
	schemaErr                                               error
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
			// metalloc's extension (leases): a PATCH may set it, POST
			// /v1/nodes keeps Ironic's schema.
			props["reservable"] = map[string]any{"type": "boolean"}
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
			rawVIF, err := schemaFS.ReadFile("schema/vif.json")
			if err != nil {
				return err
			}
			vif, err := jsonschema.UnmarshalJSON(bytes.NewReader(rawVIF))
			if err != nil {
				return fmt.Errorf("vif.json: %w", err)
			}
			schs, err := web.CompileSchemas(map[string]any{"node.json": create, "patched-node.json": patched,
				"patch.json": patch, "vif.json": vif})
			if err != nil {
				return err
			}
			createSchema, patchedNodeSchema, patchSchema = schs["node.json"], schs["patched-node.json"], schs["patch.json"]
			vifSchema = schs["vif.json"]
			return nil
		}()
	})
	return schemaErr
}

// validateSchema checks doc against sch and returns Ironic's 400 message
// ("Schema error for <name>: <what python-jsonschema would say>",
// web.SchemaError).
func validateSchema(sch *jsonschema.Schema, name string, doc any) error {
	if err := sch.Validate(doc); err != nil {
		return invalidf("Schema error for %s: %s", name, web.SchemaError(err, doc))
	}
	return nil
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
