package port

import (
	"bytes"
	"embed"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/metalloc/metalloc/web"
)

// The JSON schemas of request bodies: schema/port.json and
// schema/portgroup.json (Ironic's PORT_SCHEMA and PORTGROUP_SCHEMA, used
// for POST bodies and patched objects alike) and
// schema/local_link_connection.json (LOCAL_LINK_CONN_SCHEMA).
//
//go:embed schema/*.json
var schemaFS embed.FS

var (
	schemaOnce                           sync.Once
	portSchema, portgroupSchema, llcSch  *jsonschema.Schema
	portSchemaProps, portgroupSchemaProp map[string]bool
	schemaErr                            error
)

func loadSchemas() error {
	schemaOnce.Do(func() {
		docs := map[string]any{}
		for _, name := range []string{"port.json", "portgroup.json", "local_link_connection.json"} {
			raw, err := schemaFS.ReadFile("schema/" + name)
			if err != nil {
				schemaErr = err
				return
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err != nil {
				schemaErr = fmt.Errorf("%s: %w", name, err)
				return
			}
			docs[name] = doc
		}
		props := func(name string) map[string]bool {
			out := map[string]bool{}
			for k := range docs[name].(map[string]any)["properties"].(map[string]any) {
				out[k] = true
			}
			return out
		}
		portSchemaProps, portgroupSchemaProp = props("port.json"), props("portgroup.json")
		schs, err := web.CompileSchemas(docs)
		if err != nil {
			schemaErr = err
			return
		}
		portSchema, portgroupSchema, llcSch = schs["port.json"], schs["portgroup.json"], schs["local_link_connection.json"]
	})
	return schemaErr
}
