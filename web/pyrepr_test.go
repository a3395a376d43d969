package web

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPyFormat: PyFormat lays values out as Python 3.11's
// pprint.pformat(value, width=72) does (the expected texts are its output
// for the same JSON documents).
func TestPyFormat(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ doc, want string }{
		{`{"minLength": 1, "minimum": 1, "pattern": "^[1-9][0-9]*$", "type": ["integer", "string"]}`,
			"{'minLength': 1,\n 'minimum': 1,\n 'pattern': '^[1-9][0-9]*$',\n 'type': ['integer', 'string']}"},
		{`{"type": "object", "properties": {"name": {"type": "string", "maxLength": 200}, "uuid": {"type": "string", "format": "uuid"}, "parent_provider_uuid": {"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]}}, "required": ["name"], "additionalProperties": false}`,
			"{'additionalProperties': False,\n 'properties': {'name': {'maxLength': 200, 'type': 'string'},\n                'parent_provider_uuid': {'anyOf': [{'format': 'uuid',\n                                                    'type': 'string'},\n                                                   {'type': 'null'}]},\n                'uuid': {'format': 'uuid', 'type': 'string'}},\n 'required': ['name'],\n 'type': 'object'}"},
		{`"a long string that goes on and on and on and on and on and on and on and on and on and on and on"`,
			"('a long string that goes on and on and on and on and on and on and on '\n 'and on and on and on and on')"},
		{`""`,
			"''"},
		{`["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbb", "cccccccccccccccccccccccc", "dddddddddddddddd"]`,
			"['aaaaaaaaaaaaaaaa',\n 'bbbbbbbbbbbbbbbbbbbbbbbb',\n 'cccccccccccccccccccccccc',\n 'dddddddddddddddd']"},
		{`{"allocations": {"4e8e5957-649f-477b-9e5b-f1f75b21c03c": {"resources": {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 20}}}, "project_id": "p", "user_id": "u"}`,
			"{'allocations': {'4e8e5957-649f-477b-9e5b-f1f75b21c03c': {'resources': {'DISK_GB': 20,\n                                                                        'MEMORY_MB': 1024,\n                                                                        'VCPU': 1}}},\n 'project_id': 'p',\n 'user_id': 'u'}"},
		{`[1, 2.5, true, false, null, "x'y", "line1\nline2 is long long long long long long long long long long long long long long long long"]`,
			"[1,\n 2.5,\n True,\n False,\n None,\n \"x'y\",\n 'line1\\n'\n 'line2 is long long long long long long long long long long long long '\n 'long long long long']"},
		{`[]`,
			"[]"},
		{`{"a": [], "b": {}, "cccccccccccccccccccccccccccccccccccc": "dddddddddddddddddddddddddddddddddddddddddddddd"}`,
			"{'a': [],\n 'b': {},\n 'cccccccccccccccccccccccccccccccccccc': 'dddddddddddddddddddddddddddddddddddddddddddddd'}"},
		{`"word-without-any-spaces-that-is-way-too-long-for-the-width-of-seventy-two-columns-yes"`,
			"'word-without-any-spaces-that-is-way-too-long-for-the-width-of-seventy-two-columns-yes'"},
		{`{"nested": {"deeper": {"deepest": ["xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"]}}}`,
			"{'nested': {'deeper': {'deepest': ['xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx',\n                                   'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy']}}}"},
	} {
		d := json.NewDecoder(strings.NewReader(c.doc))
		d.UseNumber()
		var v any
		require.NoError(t, d.Decode(&v))
		require.Equal(t, c.want, PyFormat(v, 72), c.doc)
	}
}

// TestPyValidationError: the text is python-jsonschema 4.10's
// str(ValidationError) for the same violations, sub-schemas and values
// too long for one line included.
func TestPyValidationError(t *testing.T) {
	t.Parallel()
	limit := map[string]any{"type": []any{"integer", "string"}, "pattern": "^[1-9][0-9]*$", "minimum": json.Number("1"), "minLength": json.Number("1")}
	require.Equal(t, "'0' does not match '^[1-9][0-9]*$'\n\nFailed validating 'pattern' in schema['properties']['limit']:\n"+
		"    {'minLength': 1,\n     'minimum': 1,\n     'pattern': '^[1-9][0-9]*$',\n     'type': ['integer', 'string']}\n\n"+
		"On instance['limit']:\n    '0'",
		PyValidationError("'0' does not match '^[1-9][0-9]*$'", "pattern", []string{"properties", "limit"}, limit, []any{"limit"}, "0"))
	long := "a long string that goes on and on and on and on and on and on and on and on"
	require.Equal(t, "'"+long+"' is too long\n\nFailed validating 'maxLength' in schema['properties']['name']:\n"+
		"    {'maxLength': 8, 'type': 'string'}\n\nOn instance['name']:\n"+
		"    ('a long string that goes on and on and on and on and on and on and on '\n     'and on')",
		PyValidationError("'"+long+"' is too long", "maxLength", []string{"properties", "name"},
			map[string]any{"type": "string", "maxLength": json.Number("8")}, []any{"name"}, long))
}
