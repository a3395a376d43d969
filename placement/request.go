package placement

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/metalloc/metalloc/placement/candidate"
	"github.com/metalloc/metalloc/web"
)

// bodySchema is a compiled JSON Schema for a Placement request body, with
// its source document (for python-jsonschema's error texts).
type bodySchema struct {
	sch *jsonschema.Schema
	doc any
}

var msgPrinter = message.NewPrinter(language.English)

// mustBodySchema compiles src (a JSON Schema document, formats asserted as
// Placement's FormatChecker does); a bad schema panics at init.
func mustBodySchema(name, src string) *bodySchema {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(src))
	if err != nil {
		panic(fmt.Sprintf("schema %s: %v", name, err))
	}
	u := "mem://placement/" + name + ".json"
	schs, err := web.CompileSchemas(map[string]any{u: doc}, uuidFormat)
	if err != nil {
		panic(fmt.Sprintf("schema %s: %v", name, err))
	}
	return &bodySchema{sch: schs[u], doc: doc}
}

// uuidFormat is Placement's "uuid" format, oslo's is_uuid_like: any
// spelling uuid.UUID() takes (no dashes, braces, urn:uuid:), not only RFC
// 4122 text.
var uuidFormat = &jsonschema.Format{Name: "uuid", Validate: func(v any) error {
	if s, ok := v.(string); ok && !looksLikeUUID(s) {
		return errors.New("not a uuid")
	}
	return nil
}}

// requireJSONContent is Placement's require_content('application/json'):
// any other media type (or none) is a 415.
func requireJSONContent(c echo.Context) error {
	ct := c.Request().Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		if ct == "" {
			ct = "None"
		} else if err == nil {
			ct = mt
		}
		return web.PlacementErr(http.StatusUnsupportedMediaType, "",
			"The media type %s is not supported, use application/json", ct)
	}
	return nil
}

// readBody checks the content type, parses the body and validates it
// against s, as Placement's extract_json: "Malformed JSON: ..." and "JSON
// does not validate: ..." are 400s. On success the document is decoded
// into dst (when not nil) and also returned as parsed (json.Number numbers).
func readBody(c echo.Context, s *bodySchema, dst any) (any, error) {
	if err := requireJSONContent(c); err != nil {
		return nil, err
	}
	return s.parse(c, dst)
}

// decode reads the body (its content type already checked), validates it
// and unmarshals it into out, with readBody's messages.
func (s *bodySchema) decode(c echo.Context, out any) error {
	_, err := s.parse(c, out)
	return err
}

// parse reads the request body, validates it against s and, when dst is not
// nil, unmarshals it into dst; it returns the decoded document.
func (s *bodySchema) parse(c echo.Context, dst any) (any, error) {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return nil, web.PlacementErr(http.StatusBadRequest, "", "Malformed JSON: %v", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return nil, web.PlacementErr(http.StatusBadRequest, "", "Malformed JSON: %v", err)
	}
	if err := s.validate(inst); err != nil {
		return nil, err
	}
	if dst != nil {
		if err := json.Unmarshal(body, dst); err != nil {
			return nil, web.PlacementErr(http.StatusBadRequest, "", "JSON does not validate: %s", web.JSONProblem(err))
		}
	}
	return inst, nil
}

// validate checks a decoded document against s: a violation is Placement's
// 400 "JSON does not validate: <python-jsonschema's text>".
func (s *bodySchema) validate(inst any) error {
	if err := s.sch.Validate(inst); err != nil {
		return web.PlacementErr(http.StatusBadRequest, "", "JSON does not validate: %s", s.explain(err, inst))
	}
	return nil
}

// explain words the most relevant reason of a validation error as
// python-jsonschema's str(ValidationError) does (see web.PyValidationError):
// "'name' is a required property", "1 is not of type 'string'", "'x' is not
// a 'uuid'", and so on, then the keyword, sub-schema and value it failed on.
func (s *bodySchema) explain(err error, doc any) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	for {
		switch ve.ErrorKind.(type) {
		case *kind.Schema, *kind.Group, *kind.Reference, *kind.AllOf:
			if len(ve.Causes) > 0 {
				ve = ve.Causes[0]
				continue
			}
		}
		break
	}
	inst := web.ValueAt(doc, ve.InstanceLocation)
	kw := ve.ErrorKind.KeywordPath()
	schemaPath := append(schemaPointer(ve.SchemaURL), kw...)
	keyword := ""
	if len(schemaPath) > 0 {
		keyword = schemaPath[len(schemaPath)-1]
		schemaPath = schemaPath[:len(schemaPath)-1]
	}
	sub := web.ValueAt(s.doc, schemaPath)
	msg := schemaMessage(ve, inst, sub)
	return web.PyValidationError(msg, keyword, schemaPath, sub, instancePath(doc, ve.InstanceLocation), inst)
}

// schemaPointer is the JSON pointer of a schema location URL
// ("mem://x.json#/properties/a~1b" -> ["properties", "a/b"]).
func schemaPointer(u string) []string {
	_, frag, ok := strings.Cut(u, "#")
	if !ok || frag == "" || frag == "/" {
		return nil
	}
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	parts := strings.Split(strings.TrimPrefix(frag, "/"), "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts
}

// instancePath turns an instance location into python-jsonschema's path:
// array positions as ints, member names as strings.
func instancePath(doc any, loc []string) []any {
	out := make([]any, len(loc))
	cur := doc
	for i, p := range loc {
		out[i] = p
		switch c := cur.(type) {
		case []any:
			if n, err := strconv.Atoi(p); err == nil {
				out[i] = n
				if n >= 0 && n < len(c) {
					cur = c[n]
					continue
				}
			}
			cur = nil
		case map[string]any:
			cur = c[p]
		default:
			cur = nil
		}
	}
	return out
}

// schemaMessage is python-jsonschema's message (the first line of
// Placement's text) for the validation error ve on value inst, sub being the
// schema holding the failed keyword.
func schemaMessage(ve *jsonschema.ValidationError, inst, sub any) string {
	switch k := ve.ErrorKind.(type) {
	case *kind.Type:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = web.PyRepr(w)
		}
		return fmt.Sprintf("%s is not of type %s", web.PyRepr(inst), strings.Join(want, ", "))
	case *kind.Required:
		if len(k.Missing) > 0 {
			return fmt.Sprintf("%s is a required property", web.PyRepr(k.Missing[0]))
		}
	case *kind.AdditionalProperties:
		props := append([]string(nil), k.Properties...)
		sort.Strings(props)
		for i, p := range props {
			props[i] = web.PyRepr(p)
		}
		if m, ok := sub.(map[string]any); ok {
			if pp, ok := m["patternProperties"].(map[string]any); ok && len(pp) > 0 {
				// With patternProperties python-jsonschema names the
				// regexes the members failed to match.
				pats := make([]string, 0, len(pp))
				for p := range pp {
					pats = append(pats, p)
				}
				sort.Strings(pats)
				for i, p := range pats {
					pats[i] = web.PyRepr(p)
				}
				verb := "does"
				if len(props) > 1 {
					verb = "do"
				}
				return fmt.Sprintf("%s %s not match any of the regexes: %s", strings.Join(props, ", "), verb, strings.Join(pats, ", "))
			}
		}
		verb := "was"
		if len(props) > 1 {
			verb = "were"
		}
		return fmt.Sprintf("Additional properties are not allowed (%s %s unexpected)", strings.Join(props, ", "), verb)
	case *kind.MaxLength:
		return fmt.Sprintf("%s is too long", web.PyRepr(inst))
	case *kind.MinLength:
		return fmt.Sprintf("%s is too short", web.PyRepr(inst))
	case *kind.Pattern:
		return fmt.Sprintf("%s does not match %s", web.PyRepr(inst), web.PyRepr(k.Want))
	case *kind.Format:
		return fmt.Sprintf("%s is not a %s", web.PyRepr(inst), web.PyRepr(k.Want))
	case *kind.UniqueItems:
		return fmt.Sprintf("%s has non-unique elements", web.PyRepr(inst))
	case *kind.Minimum:
		return fmt.Sprintf("%s is less than the minimum of %s", web.PyRepr(inst), k.Want.RatString())
	case *kind.Maximum:
		return fmt.Sprintf("%s is greater than the maximum of %s", web.PyRepr(inst), k.Want.RatString())
	case *kind.MinProperties:
		return fmt.Sprintf("%s does not have enough properties", web.PyRepr(inst))
	case *kind.MinItems:
		return fmt.Sprintf("%s is too short", web.PyRepr(inst))
	case *kind.MaxItems:
		return fmt.Sprintf("%s is too long", web.PyRepr(inst))
	case *kind.AnyOf, *kind.OneOf:
		return fmt.Sprintf("%s is not valid under any of the given schemas", web.PyRepr(inst))
	}
	return ve.ErrorKind.LocalizedString(msgPrinter)
}

// badQuery is Placement's 400 for query parameters failing their schema.
func badQuery(format string, args ...any) *web.PlacementError {
	return web.PlacementErr(http.StatusBadRequest, "", "Invalid query string parameters: "+format, args...)
}

// badQueryValue is Placement's 400 for a query parameter failing its
// property schema sub (keyword the one failed), worded as python-jsonschema
// does (see web.PyValidationError).
func badQueryValue(msg, keyword, param string, sub map[string]any, value string) *web.PlacementError {
	return badQuery("%s", web.PyValidationError(msg, keyword, []string{"properties", param}, sub, []any{param}, value))
}

// badQueryUUID is the 400 for a query parameter whose schema is
// {"type": "string", "format": "uuid"} and value is not a uuid.
func badQueryUUID(param, value string) *web.PlacementError {
	return badQueryValue(web.PyRepr(value)+" is not a 'uuid'", "format", param,
		map[string]any{"type": "string", "format": "uuid"}, value)
}

// badLimit is the 400 for a limit that is not a positive integer, Placement's
// pattern ^[1-9][0-9]*$ on the string (the sub-schema shown is
// GET_SCHEMA_1_16's limit).
func badLimit(l string) *web.PlacementError {
	return badQueryValue(fmt.Sprintf("%s does not match %s", web.PyRepr(l), web.PyRepr(candLimitPattern.String())),
		"pattern", "limit", map[string]any{"type": []any{"integer", "string"}, "pattern": candLimitPattern.String(),
			"minimum": 1, "minLength": 1}, l)
}

// checkQueryParams rejects query parameters outside allowed, as Placement's
// schemas with additionalProperties false do.
func checkQueryParams(q url.Values, allowed ...string) error {
	var extra []string
	for k := range q {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
			}
		}
		if !ok {
			extra = append(extra, "'"+k+"'")
		}
	}
	if len(extra) == 0 {
		return nil
	}
	sort.Strings(extra)
	verb := "was"
	if len(extra) > 1 {
		verb = "were"
	}
	return badQuery("Additional properties are not allowed (%s %s unexpected)", strings.Join(extra, ", "), verb)
}

// lastValue is the value Placement's dict(req.GET) keeps for a repeated
// parameter: the last one.
func lastValue(q url.Values, key string) string {
	v := q[key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// parseMemberOf is Placement's normalize_member_of_qs_params for the
// unsuffixed member_of of GET /resource_providers (see parseMemberOfParams).
func parseMemberOf(vals []string, v web.Version) ([][]uuid.UUID, []uuid.UUID, error) {
	return parseMemberOfParams(vals, "", v)
}

// parseResources is Placement's normalize_resources_qs_param:
// "CLASS:AMOUNT,..." with positive integer amounts.
func parseResources(s string) ([]candidate.ResourceAmount, error) {
	const form = "Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: %s."
	if strings.TrimSpace(s) == "" {
		return nil, web.PlacementErr(http.StatusBadRequest, "", form, "empty string")
	}
	var out []candidate.ResourceAmount
	for _, part := range strings.Split(s, ",") {
		fields := strings.Split(part, ":")
		if len(fields) != 2 {
			return nil, web.PlacementErr(http.StatusBadRequest, "", form, part)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(fields[1]), 10, 64)
		if err != nil {
			return nil, web.PlacementErr(http.StatusBadRequest, "",
				"Requested resource %s expected positive integer amount. Got: %s.", fields[0], fields[1])
		}
		if n < 1 {
			return nil, web.PlacementErr(http.StatusBadRequest, "",
				"Requested resource %s requires amount >= 1. Got: %d.", fields[0], n)
		}
		replaced := false
		for i := range out {
			if out[i].Class == fields[0] {
				out[i].Amount, replaced = n, true
			}
		}
		if !replaced {
			out = append(out, candidate.ResourceAmount{Class: fields[0], Amount: n})
		}
	}
	return out, nil
}

// parseRequired is Placement's normalize_traits_qs_params: the last value
// only before 1.39; "!" forbidden from 1.22; "in:" any-of from 1.39.
func parseRequired(vals []string, v web.Version) ([][]string, []string, error) {
	allowForbidden, allowAny := v.AtLeast(1, 22), v.AtLeast(1, 39)
	if !allowAny {
		vals = vals[len(vals)-1:]
	}
	expected := "HW_CPU_X86_VMX,CUSTOM_MAGIC"
	if allowForbidden {
		expected = "HW_CPU_X86_VMX,!CUSTOM_MAGIC"
	}
	var required [][]string
	var forbidden []string
	for _, val := range vals {
		if strings.HasPrefix(val, "in:") {
			if !allowAny {
				return nil, nil, badQuery("The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion 1.39. Got: %s", val)
			}
			var any []string
			for _, t := range strings.Split(val[3:], ",") {
				t = strings.TrimSpace(t)
				if t == "" {
					return nil, nil, badQuery("Expected 'required' parameter value of the form: in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: %s", val)
				}
				if strings.HasPrefix(t, "!") {
					return nil, nil, badQuery("The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' does not support forbidden traits. Got: %s", val)
				}
				any = append(any, t)
			}
			required = append(required, any)
			continue
		}
		var forb []string
		for _, t := range strings.Split(val, ",") {
			t = strings.TrimSpace(t)
			name := strings.TrimLeft(t, "!")
			if t == "" || name == "" {
				return nil, nil, badQuery("Expected 'required' parameter value of the form: %s. Got an empty trait in: %s", expected, val)
			}
			if strings.HasPrefix(t, "!") {
				forb = append(forb, name)
			} else {
				required = append(required, []string{t})
			}
		}
		if len(forb) > 0 && !allowForbidden {
			return nil, nil, badQuery("Expected 'required' parameter value of the form: %s. Got: %s", expected, val)
		}
		forbidden = append(forbidden, forb...)
	}
	return required, forbidden, nil
}
