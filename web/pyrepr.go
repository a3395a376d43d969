package web

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// PyRepr renders a decoded JSON value the way Python's repr() shows it, so
// that validation messages read like Ironic's and Placement's (which embed
// Python reprs):
// 'str', True/False/None, [1, 2], {'k': 'v'}.
func PyRepr(v any) string {
	var b strings.Builder
	writePyRepr(&b, v)
	return b.String()
}

func writePyRepr(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case string:
		b.WriteString(PyStr(x))
	case json.Number:
		b.WriteString(x.String())
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e16 {
			b.WriteString(strconv.FormatInt(int64(x), 10))
		} else {
			b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writePyRepr(b, e)
		}
		b.WriteByte(']')
	case []string:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(PyStr(e))
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(PyStr(k))
			b.WriteString(": ")
			writePyRepr(b, x[k])
		}
		b.WriteByte('}')
	default:
		fmt.Fprint(b, x)
	}
}

// PyStr quotes s as Python's repr of a str does: single quotes unless s
// contains a single quote and no double quote.
func PyStr(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// PyValidationError renders a JSON Schema violation the way
// python-jsonschema's str(ValidationError) does, the text Placement puts
// after "JSON does not validate: " and "Invalid query string parameters: "
// and that its clients and tests match on:
//
//	<msg>
//
//	Failed validating '<keyword>' in schema['properties']['total']:
//	    <sub-schema>
//
//	On instance['total']:
//	    <value>
//
// schemaPath is the path of the sub-schema holding keyword (without the
// keyword), instancePath that of the offending value (strings for object
// members, ints for array items).
func PyValidationError(msg, keyword string, schemaPath []string, subschema any, instancePath []any, value any) string {
	sp := make([]any, len(schemaPath))
	for i, s := range schemaPath {
		sp[i] = s
	}
	// python-jsonschema indents pformat's continuation lines by 4 under
	// the first.
	indented := func(v any) string { return strings.ReplaceAll(PyFormat(v, 72), "\n", "\n    ") }
	return fmt.Sprintf("%s\n\nFailed validating %s in %s:\n    %s\n\nOn %s:\n    %s",
		msg, PyStr(keyword), pyIndex("schema", sp), indented(subschema), pyIndex("instance", instancePath), indented(value))
}

// PyFormat renders a decoded JSON value as Python's pprint.pformat(v,
// width=width) does (sorted keys, indent 1, not compact): PyRepr when it
// fits in width columns, else a dict with one member per line, a list with
// one item per line and a long string cut at spaces into adjacent
// literals, each nested value fitted in what is left of its line.
// python-jsonschema shows the sub-schema and the value of a violation this
// way (width 72), so a long one spans several lines.
func PyFormat(v any, width int) string {
	var b strings.Builder
	(&pyPrinter{b: &b, width: width}).format(v, 0, 0, 0)
	return b.String()
}

// pyPrinter is pprint.PrettyPrinter's layout for decoded JSON values.
type pyPrinter struct {
	b     *strings.Builder
	width int
}

// format writes v at column indent, allowance columns being needed after
// it on its last line (closing brackets, a comma), level deep.
func (p *pyPrinter) format(v any, indent, allowance, level int) {
	rep := PyRepr(v)
	if utf8.RuneCountInString(rep) <= p.width-indent-allowance {
		p.b.WriteString(rep)
		return
	}
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		p.b.WriteByte('{')
		indent++
		for i, k := range keys {
			kr := PyStr(k)
			p.b.WriteString(kr)
			p.b.WriteString(": ")
			last := i == len(keys)-1
			p.format(x[k], indent+utf8.RuneCountInString(kr)+2, p.itemAllowance(last, allowance+1), level+1)
			if !last {
				p.b.WriteString(",\n" + strings.Repeat(" ", indent))
			}
		}
		p.b.WriteByte('}')
	case []any:
		p.list(len(x), func(i int) any { return x[i] }, indent, allowance, level)
	case []string:
		p.list(len(x), func(i int) any { return x[i] }, indent, allowance, level)
	case string:
		p.str(x, indent, allowance, level+1)
	default:
		p.b.WriteString(rep)
	}
}

// itemAllowance is what follows a member: a comma, or for the last one
// what follows its container.
func (p *pyPrinter) itemAllowance(last bool, allowance int) int {
	if last {
		return allowance
	}
	return 1
}

// list writes the n items of a list too long for one line, one per line.
func (p *pyPrinter) list(n int, item func(int) any, indent, allowance, level int) {
	p.b.WriteByte('[')
	indent++
	for i := range n {
		if i > 0 {
			p.b.WriteString(",\n" + strings.Repeat(" ", indent))
		}
		p.format(item(i), indent, p.itemAllowance(i == n-1, allowance+1), level+1)
	}
	p.b.WriteByte(']')
}

// str writes a string too long for its line as adjacent literals, cut
// after runs of whitespace and at line ends, each fitting the width; a
// string alone (level 1) is parenthesized.
func (p *pyPrinter) str(s string, indent, allowance, level int) {
	if s == "" {
		p.b.WriteString(PyStr(s))
		return
	}
	if level == 1 {
		indent++
		allowance++
	}
	maxWidth := p.width - indent
	lines := pySplitLines(s)
	var chunks []string
	for i, line := range lines {
		lastLine := i == len(lines)-1
		fit := maxWidth
		if lastLine {
			fit -= allowance
		}
		if utf8.RuneCountInString(PyStr(line)) <= fit {
			chunks = append(chunks, PyStr(line))
			continue
		}
		parts := pyWordsWithSpace(line)
		fit2 := maxWidth
		current := ""
		for j, part := range parts {
			cand := current + part
			if j == len(parts)-1 && lastLine {
				fit2 -= allowance
			}
			if utf8.RuneCountInString(PyStr(cand)) > fit2 {
				if current != "" {
					chunks = append(chunks, PyStr(current))
				}
				current = part
			} else {
				current = cand
			}
		}
		if current != "" {
			chunks = append(chunks, PyStr(current))
		}
	}
	if len(chunks) == 1 {
		p.b.WriteString(PyStr(s))
		return
	}
	if level == 1 {
		p.b.WriteByte('(')
	}
	for i, c := range chunks {
		if i > 0 {
			p.b.WriteString("\n" + strings.Repeat(" ", indent))
		}
		p.b.WriteString(c)
	}
	if level == 1 {
		p.b.WriteByte(')')
	}
}

// pySplitLines is Python's str.splitlines(keepends=True) for the line
// breaks JSON text carries (\n, \r\n, \r).
func pySplitLines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			out = append(out, s)
			break
		}
		end := i + 1
		if s[i] == '\r' && end < len(s) && s[end] == '\n' {
			end++
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

// pyWordsWithSpace cuts s into runs of non-space followed by their
// spaces, as re.findall(r'\S*\s*', s) without its final empty match.
func pyWordsWithSpace(s string) []string {
	var out []string
	start, inSpace := 0, false
	for i, r := range s {
		sp := unicode.IsSpace(r)
		if !sp && inSpace {
			out = append(out, s[start:i])
			start = i
		}
		inSpace = sp
	}
	return append(out, s[start:])
}

// pyIndex is python-jsonschema's format_as_index: container['a'][0].
func pyIndex(container string, path []any) string {
	var b strings.Builder
	b.WriteString(container)
	for _, p := range path {
		b.WriteByte('[')
		writePyRepr(&b, p)
		b.WriteByte(']')
	}
	return b.String()
}
