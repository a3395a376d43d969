package topology

import (
	"encoding/json"
	"regexp"
	"testing"
)

// dbName and dbSource are topology_levels' CHECK constraints
// (migrations/00010_topology.sql) in Go: what ValidateLevels accepts must
// pass them, or a PUT would be refused by the database (500) instead of
// by the validation (400).
var (
	dbName   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)
	dbSource = regexp.MustCompile(`^(?s:((extra|properties)\..+|trait:[^\s]+|aggregate))$`)
)

// FuzzPutBody feeds arbitrary bytes to the PUT /v1/topology decoder: the
// schema, decoding into Document, ValidateLevels. Nothing may panic, a
// body the schema accepts must decode, and valid levels must pass the
// table's constraints. Run it longer with:
// go test ./topology -run '^$' -fuzz FuzzPutBody -fuzztime 5m
func FuzzPutBody(f *testing.F) {
	for _, s := range []string{
		`{"levels":[{"name":"row","source":"extra.row"},{"name":"rack","source":"trait:CUSTOM_RACK_"}]}`,
		`{"levels":[{"name":"a","source":"aggregate"},{"name":"u","source":"properties.slot.u"}]}`,
		`{"levels":[]}`, `{"levels":null}`, `{"levels":[{"name":"r","source":"trait:A B"}]}`,
		`{"levels":[{"name":"r","source":"extra.\u0000"}]}`, `{"levels":[{"name":"\ud800","source":"extra.x"}]}`,
		`[]`, `null`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := putSchema.Decode(body); err != nil {
			return
		}
		var doc Document
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatalf("schema accepted %q but it does not decode: %v", body, err)
		}
		if ValidateLevels(doc.Levels) != nil {
			return
		}
		for _, l := range doc.Levels {
			if !dbName.MatchString(l.Name) || !dbSource.MatchString(l.Source) {
				t.Fatalf("valid level %q=%q fails the table's constraints", l.Name, l.Source)
			}
		}
	})
}
