package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// FormatValue writes a value of key k as the sample file and the README
// show it: durations with their unit ("60s", "1h", "15ms"), floats with a
// decimal point, strings quoted for YAML when they need it ("" always).
func FormatValue(k *Key, v any) string {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Map) && rv.IsNil() {
		return ""
	}
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	switch x := rv.Interface().(type) {
	case time.Duration:
		return formatDuration(x)
	case float64:
		return formatFloat(x)
	case string:
		return yamlString(x)
	case map[string]float64:
		parts := make([]string, 0, len(x))
		for _, name := range sortedKeys(anyMap(x)) {
			parts = append(parts, name+": "+formatFloat(x[name]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(rv.Interface())
}

func anyMap(m map[string]float64) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func formatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	return d.String()
}

func formatFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

var plainYAML = regexp.MustCompile(`^[A-Za-z0-9_./:?=&+-]*[A-Za-z0-9_./?=&+-]$`)

// yamlString quotes s when YAML would not read it back as the same string.
func yamlString(s string) string {
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "null", "~":
		return strconv.Quote(s)
	}
	if plainYAML.MatchString(s) && !strings.Contains(s, ": ") {
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return s
		}
	}
	return strconv.Quote(s)
}

// DefaultString is the key's default as documented: DefaultText, or the
// formatted Default.
func (k *Key) DefaultString() string {
	if k.DefaultText != "" {
		return k.DefaultText
	}
	return FormatValue(k, k.Default)
}

// sampleHeader opens configs/metalloc.yaml.
const sampleHeader = `# metalloc configuration. Every key can also be set with an environment
# variable METALLOC_<SECTION>_<KEY> (e.g. METALLOC_CONDUCTOR_WORKERS=32) or a
# command-line flag --<section>.<key> on every binary that reads the key.
# Precedence: flag > environment > file > default. An unknown key or
# METALLOC_ variable stops the binary at start-up; check a file with
# "metalloc-manage config check --config FILE". Durations use Go syntax:
# 500ms, 10s, 1m.
#
# Generated from the key definitions in config/registry.go (make generate);
# edit those, not this file, which is installed as /etc/metalloc/metalloc.yaml.
`

// SampleYAML is configs/metalloc.yaml: every key with its description,
// default and readers, set to its default (or its example), keys without
// a default commented out.
func SampleYAML() string {
	var b strings.Builder
	b.WriteString(sampleHeader)
	for _, sec := range sections {
		b.WriteString("\n")
		wrap(&b, "# ", sec.Doc)
		b.WriteString(sec.Name + ":\n")
		for _, k := range Keys() {
			if k.Section() != sec.Name {
				continue
			}
			_, name, _ := strings.Cut(k.Name, ".")
			doc := k.Doc
			if len(k.Values) > 0 {
				doc += " One of: " + strings.Join(k.Values, ", ") + "."
			}
			doc += " Default: " + orEmpty(k.DefaultString()) + "."
			wrap(&b, "  # ", strings.ReplaceAll(doc, "`", ""))
			val := k.Example
			if val == "" {
				val = FormatValue(k, k.Default)
			}
			if k.Default == nil && k.DefaultEnv == "" {
				fmt.Fprintf(&b, "  # %s: %s\n", name, val)
			} else {
				fmt.Fprintf(&b, "  %s: %s\n", name, val)
			}
		}
	}
	return b.String()
}

func orEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// wrap writes text as lines of at most 78 columns, each starting with
// prefix.
func wrap(b *strings.Builder, prefix, text string) {
	line := prefix
	for _, w := range strings.Fields(text) {
		if len(line) > len(prefix) && len(line)+1+len(w) > 78 {
			b.WriteString(line + "\n")
			line = prefix
		}
		if len(line) > len(prefix) {
			line += " "
		}
		line += w
	}
	if len(line) > len(prefix) {
		b.WriteString(line + "\n")
	}
}

// MarkdownTable is the README's configuration table: every key with its
// type (and unit or values), default, the binaries that read it and its
// description.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| key | type | default | read by | description |\n|---|---|---|---|---|\n")
	for _, k := range Keys() {
		typ := k.Type()
		if k.Unit != "" {
			typ += ", " + k.Unit
		}
		if len(k.Values) > 0 {
			typ += ": `" + strings.Join(k.Values, "`, `") + "`"
		}
		def := k.DefaultText
		if def == "" {
			def = "`" + orEmpty(FormatValue(k, k.Default)) + "`"
		}
		var readers []string
		for _, r := range k.Readers {
			readers = append(readers, r.Short())
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.Name, typ, def, strings.Join(readers, ", "),
			strings.ReplaceAll(k.Doc, "|", `\|`))
	}
	return b.String()
}
