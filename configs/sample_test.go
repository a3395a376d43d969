package configs

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/metalloc/metalloc/config"
)

// TestSampleConfigDocumentsEveryKey: every configuration key appears in
// metalloc.yaml (set, or commented out as an example) and in the README's
// configuration table, and the sample loads.
func TestSampleConfigDocumentsEveryKey(t *testing.T) {
	sample, err := os.ReadFile("metalloc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load("metalloc.yaml", nil); err != nil {
		t.Fatalf("the sample does not load: %v", err)
	}
	// Section of each line of the sample: the last unindented "name:".
	section, inSample := "", map[string]bool{}
	for _, line := range strings.Split(string(sample), "\n") {
		if m := regexp.MustCompile(`^([a-z_]+):`).FindStringSubmatch(line); m != nil {
			section = m[1]
		} else if m := regexp.MustCompile(`^  #? ?([a-z_{},]+):`).FindStringSubmatch(line); m != nil {
			inSample[section+"."+m[1]] = true
		}
	}
	inReadme := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z_{},]+\\.[a-z_{},]+)`").FindAllStringSubmatch(string(readme), -1) {
		for _, k := range expandBraces(m[1]) {
			inReadme[k] = true
		}
	}
	for _, k := range config.Keys() {
		if !inSample[k] {
			t.Errorf("configs/metalloc.yaml does not document %s", k)
		}
		if !inReadme[k] {
			t.Errorf("README's configuration table does not document %s", k)
		}
	}
}

// expandBraces expands one {a,b} group: "x.{a,b}_y" is x.a_y and x.b_y.
func expandBraces(s string) []string {
	i, j := strings.Index(s, "{"), strings.Index(s, "}")
	if i < 0 || j < i {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[i+1:j], ",") {
		out = append(out, expandBraces(s[:i]+alt+s[j+1:])...)
	}
	return out
}
