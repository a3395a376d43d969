package allocation

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/metalloc/metalloc/web"
)

// AppendDoc appends v's document at microversion ver (Doc) as JSON to b:
// byte for byte what encoding/json writes for Doc's map with HTML escaping
// off (keys in sorted order, extra compacted, strings escaped alike), with
// no trailing newline and without building the map (issue 29: the answer
// to a POST or a polling GET is most of a request's CPU after net/http).
// It fails only if the stored extra is not valid JSON.
func (v View) AppendDoc(b []byte, base string, ver web.Version) ([]byte, error) {
	u := v.Uuid.String()
	b = append(b, '{')
	if v.GroupUUID != nil {
		b = append(b, `"allocation_group_uuid":`...)
		b = appendJSONString(b, v.GroupUUID.String())
		b = append(b, ',')
	}
	b = append(b, `"candidate_nodes":[`...)
	for i, c := range v.CandidateNodes {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, c.String())
	}
	b = append(b, `],"created_at":`...)
	created := v.CreatedAt
	b = appendTimestamp(b, web.Timestamp(&created))
	b = append(b, `,"extra":`...)
	if len(v.Extra) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, v.Extra); err != nil {
			return b, err
		}
		b = append(b, buf.Bytes()...)
	} else {
		b = append(b, '{', '}')
	}
	b = append(b, `,"last_error":`...)
	b = appendOptString(b, v.LastError)
	b = append(b, `,"links":[`...)
	for i, l := range web.ResourceLinks(base, "allocations", u) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"href":`...)
		b = appendJSONString(b, l.Href)
		b = append(b, `,"rel":`...)
		b = appendJSONString(b, l.Rel)
		if l.Type != "" {
			b = append(b, `,"type":`...)
			b = appendJSONString(b, l.Type)
		}
		b = append(b, '}')
	}
	b = append(b, `],"name":`...)
	b = appendOptString(b, v.Name)
	b = append(b, `,"node_uuid":`...)
	if v.NodeUUID != nil && v.State != StateAllocating { // as Doc
		b = appendJSONString(b, v.NodeUUID.String())
	} else {
		b = append(b, "null"...)
	}
	if ver.AtLeast(1, 60) {
		b = append(b, `,"owner":`...)
		b = appendOptString(b, v.Owner)
	}
	b = append(b, `,"resource_class":`...)
	b = appendJSONString(b, v.ResourceClass)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(v.State))
	b = append(b, `,"traits":[`...)
	for i, t := range v.Traits {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, t)
	}
	b = append(b, `],"updated_at":`...)
	b = appendTimestamp(b, web.Timestamp(v.UpdatedAt))
	b = append(b, `,"uuid":`...)
	b = appendJSONString(b, u)
	return append(b, '}'), nil
}

// writeDoc answers v's document with status, as c.JSON(status,
// web.Project(v.Doc(base, ver), fields)) would: written by AppendDoc
// unless fields projects it or the request asks for indentation (?pretty,
// or echo in debug mode), which take the map as before.
func writeDoc(c echo.Context, status int, v View, base string, ver web.Version, fields []string) error {
	if _, pretty := c.QueryParams()["pretty"]; fields == nil && !pretty && !c.Echo().Debug {
		if b, err := v.AppendDoc(make([]byte, 0, 1024), base, ver); err == nil {
			return c.JSONBlob(status, append(b, '\n')) // as json.Encoder ends a value
		}
	}
	return c.JSON(status, web.Project(v.Doc(base, ver), fields))
}

// appendOptString appends s as a JSON string, or null when s is nil.
func appendOptString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendJSONString(b, *s)
}

// appendTimestamp appends web.Timestamp's value t: a string or null.
func appendTimestamp(b []byte, t any) []byte {
	if s, ok := t.(string); ok {
		return appendJSONString(b, s)
	}
	return append(b, "null"...)
}

// appendJSONString appends s quoted as encoding/json quotes a string with
// HTML escaping off: ", \ and control characters escaped (\b, \f, \n, \r,
// \t by name, the others as \u00XX), U+2028 and U+2029 as \u2028 and
// \u2029, and each invalid UTF-8 byte as \ufffd.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
