package configs

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/metalloc/metalloc/config"
)

var update = flag.Bool("update", false, "rewrite metalloc.yaml and the README's configuration table from the key definitions")

// Markers around the generated table in README.md.
const (
	tableBegin = "<!-- BEGIN configuration table: generated from config/registry.go by `make generate`; do not edit -->\n"
	tableEnd   = "<!-- END configuration table -->\n"
)

// TestGeneratedDocs: configs/metalloc.yaml and the README's configuration
// table are what the key definitions (config/registry.go) generate, so a
// key cannot be added, renamed or given another default without them; the
// sample loads without a problem. `make generate` (go test ./configs -run
// TestGeneratedDocs -update) rewrites both.
func TestGeneratedDocs(t *testing.T) {
	sample := config.SampleYAML()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(readme), tableBegin)
	_, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok || !ok2 {
		t.Fatalf("README.md has no %q ... %q block", tableBegin, tableEnd)
	}
	newReadme := before + tableBegin + config.MarkdownTable() + tableEnd + after
	if *update {
		if err := os.WriteFile("metalloc.yaml", []byte(sample), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("../README.md", []byte(newReadme), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile("metalloc.yaml"); string(got) != sample {
		t.Errorf("configs/metalloc.yaml is not what config/registry.go generates: run `make generate`")
	}
	if newReadme != string(readme) && !*update {
		t.Errorf("README.md's configuration table is not what config/registry.go generates: run `make generate`")
	}
	t.Setenv("DATABASE_URL", "")
	if _, err := config.Load("metalloc.yaml", nil); err != nil {
		t.Fatalf("the sample does not load: %v", err)
	}
	for _, k := range config.Keys() {
		if !strings.Contains(sample, strings.TrimPrefix(k.Name, k.Section()+".")+":") {
			t.Errorf("metalloc.yaml does not show %s", k.Name)
		}
	}
}
