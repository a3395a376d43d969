package config

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The documentation generated from the key definitions: the sample
// configuration configs/metalloc.yaml and docs/configuration.md's
// configuration table. `make generate` runs TestGeneratedDocs -update to rewrite both.

var update = flag.Bool("update", false, "rewrite configs/metalloc.yaml and docs/configuration.md's configuration table from the key definitions")

// Markers around the generated table in docs/configuration.md.
const (
	tableBegin = "<!-- BEGIN configuration table: generated from config/registry.go by `make generate`; do not edit -->\n"
	tableEnd   = "<!-- END configuration table -->\n"
)

// TestGeneratedDocs: configs/metalloc.yaml and docs/configuration.md's
// configuration table are what the key definitions (config/registry.go) generate, so a
// key cannot be added, renamed or given another default without them; the
// sample loads without a problem. `make generate` (go test ./config -run
// TestGeneratedDocs -update) rewrites both.
func TestGeneratedDocs(t *testing.T) {
	const samplePath, readmePath = "../configs/metalloc.yaml", "../docs/configuration.md"
	sample := sampleYAML()
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(readme), tableBegin)
	_, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok || !ok2 {
		t.Fatalf("docs/configuration.md has no %q ... %q block", tableBegin, tableEnd)
	}
	newReadme := before + tableBegin + markdownTable() + tableEnd + after
	if *update {
		if err := os.WriteFile(samplePath, []byte(sample), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(readmePath, []byte(newReadme), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(samplePath); string(got) != sample {
		t.Errorf("configs/metalloc.yaml is not what config/registry.go generates: run `make generate`")
	}
	if newReadme != string(readme) && !*update {
		t.Errorf("docs/configuration.md's configuration table is not what config/registry.go generates: run `make generate`")
	}
	t.Setenv("DATABASE_URL", "")
	if _, err := Load(samplePath, nil); err != nil {
		t.Fatalf("the sample does not load: %v", err)
	}
	for _, k := range Keys() {
		if !strings.Contains(sample, strings.TrimPrefix(k.Name, section(k)+".")+":") {
			t.Errorf("metalloc.yaml does not show %s", k.Name)
		}
	}
}

// short is the binary's name without "metalloc-" ("api").
func short(b Binary) string { return strings.TrimPrefix(string(b), "metalloc-") }

// section is the part of the key's of the name before the dot.
func section(k *Key) string { s, _, _ := strings.Cut(k.Name, "."); return s }

// keyType names the key's type as the documentation does: string, bool, int,
// float, duration, "float (optional)" or "map of float".
func keyType(k *Key) string {
	t := k.typ
	optional := ""
	if t.Kind() == reflect.Pointer {
		t, optional = t.Elem(), " (optional)"
	}
	if t == reflect.TypeFor[time.Duration]() {
		return "duration" + optional
	}
	switch t.Kind() {
	case reflect.Map:
		return "map of " + kindName(t.Elem().Kind())
	case reflect.Slice:
		return "list of " + kindName(t.Elem().Kind())
	default:
		return kindName(t.Kind()) + optional
	}
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "int"
	case reflect.Float64:
		return "float"
	default:
		return k.String()
	}
}

// defaultString is the key's default as documented: DefaultText, or the
// formatted Default.
func defaultString(k *Key) string {
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

// sampleYAML is configs/metalloc.yaml: every key with its description,
// default and readers, set to its default (or its example), keys without
// a default commented out.
func sampleYAML() string {
	var b strings.Builder
	b.WriteString(sampleHeader)
	for _, sec := range sections {
		b.WriteString("\n")
		wrap(&b, "# ", sec.Doc)
		b.WriteString(sec.Name + ":\n")
		for _, k := range Keys() {
			if section(k) != sec.Name {
				continue
			}
			_, name, _ := strings.Cut(k.Name, ".")
			doc := k.Doc
			if len(k.Values) > 0 {
				doc += " One of: " + strings.Join(k.Values, ", ") + "."
			}
			doc += " Default: " + orEmpty(defaultString(k)) + "."
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

// markdownTable is docs/configuration.md's configuration table: every key with its
// type (and unit or values), default, the binaries that read it and its
// description.
func markdownTable() string {
	var b strings.Builder
	b.WriteString("| key | type | default | read by | description |\n|---|---|---|---|---|\n")
	for _, k := range Keys() {
		typ := keyType(k)
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
			readers = append(readers, short(r))
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.Name, typ, def, strings.Join(readers, ", "),
			strings.ReplaceAll(k.Doc, "|", `\|`))
	}
	return b.String()
}
