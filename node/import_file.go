package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// importFile is a node file being read: its "nodes" entries are decoded
// a chunk at a time (next), so that a file of 1,000,000 nodes is never
// held as Go values all at once (it took 1.3 GB, and a quarter of the
// import's CPU went to collecting its garbage).
type importFile struct {
	// total is the number of entries.
	total int
	// dec is positioned inside the "nodes" list (nil: none).
	dec *json.Decoder
}

// openImportFile reads the file (JSON, or YAML, of which JSON is a subset)
// and checks its top level: an object whose keys are "nodes" (a list)
// and, empty, "chassis".
func openImportFile(r io.Reader) (*importFile, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading node file: %w", err)
	}
	// A JSON file is read as JSON (five times faster than the YAML parser
	// on a large file); anything else as YAML, of which JSON is a subset,
	// round-tripped through JSON so that values have the types request
	// bodies have.
	if !json.Valid(raw) {
		var doc any
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("node file is neither valid JSON nor valid YAML: %w", err)
		}
		if raw, err = json.Marshal(doc); err != nil {
			return nil, fmt.Errorf("node file holds values JSON cannot represent: %w", err)
		}
	}
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		return nil, errTopLevel
	}
	// The top level's keys, each value decoded but for the node list, of
	// which only its place in raw is kept (no copy of a large file).
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, errTopLevel
	}
	f := &importFile{}
	var list []byte // the node list's bytes in raw
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("node file: %w", err)
		}
		switch key, _ := tok.(string); key {
		case "nodes":
			start := dec.InputOffset()
			var n int
			if n, err = countList(dec); err != nil {
				return nil, err
			}
			// From after the key: the colon, the list.
			list = bytes.TrimLeft(raw[start:dec.InputOffset()], " \t\r\n:")
			f.total = n
		case "chassis":
			var l []any
			if err := dec.Decode(&l); err != nil || len(l) > 0 {
				return nil, fmt.Errorf("node file: chassis are not supported by metalloc")
			}
		default:
			return nil, fmt.Errorf("node file: unknown top-level key %q (expected \"nodes\")", key)
		}
	}
	if f.total == 0 {
		return &importFile{}, nil
	}
	f.dec = json.NewDecoder(bytes.NewReader(list))
	if _, err := f.dec.Token(); err != nil {
		return nil, fmt.Errorf("node file: %w", err)
	}
	return f, nil
}

var errTopLevel = fmt.Errorf("node file: the top level must be an object with a \"nodes\" list")

// countList reads the value after a "nodes" key: null, or a list whose
// entries it counts.
func countList(dec *json.Decoder) (int, error) {
	tok, err := dec.Token()
	if err != nil {
		return 0, fmt.Errorf("node file: %w", err)
	}
	if tok == nil {
		return 0, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return 0, fmt.Errorf("node file: \"nodes\" must be a list")
	}
	n := 0
	for dec.More() {
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return 0, fmt.Errorf("node file: %w", err)
		}
		n++
	}
	if _, err := dec.Token(); err != nil { // ]
		return 0, fmt.Errorf("node file: %w", err)
	}
	return n, nil
}

// next decodes up to n more entries.
func (f *importFile) next(n int) ([]any, error) {
	var out []any
	for f.dec != nil && len(out) < n && f.dec.More() {
		var v any
		if err := f.dec.Decode(&v); err != nil {
			return out, fmt.Errorf("node file: %w", err)
		}
		out = append(out, v)
	}
	return out, nil
}
