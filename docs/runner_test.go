package docs

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDocRunnerCatchesDrift checks the runner on blocks made up here: a
// failing command fails its block (also mid-block), curl fails on an HTTP
// error status, shell state carries from block to block, a transcript's
// output and exit status are compared, and a marker before an indented
// block inside a list item is found.
func TestDocRunnerCatchesDrift(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			http.Error(w, `{"error_message": "not here"}`, http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte("fine\n"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	sh := startShell(t, dir, dir, readerEnv(dir))
	defer sh.Close()

	if out, status := sh.run("X=kept\nfalse\necho not reached", time.Minute); status != 1 ||
		strings.Contains(out, "not reached") || !strings.Contains(out, "doctest: exit status 1 at line 2: false") {
		t.Errorf("a failing command: status %d, output %q", status, out)
	}
	if out, status := sh.run(`echo "$X"`, time.Minute); status != 0 || out != "kept\n" {
		t.Errorf("state between blocks: status %d, output %q", status, out)
	}
	if _, status := sh.run("curl -s "+srv.URL+"/missing", time.Minute); status != 22 {
		t.Errorf("curl of a 404: status %d, want 22", status)
	}
	if out, status := sh.run("curl -s "+srv.URL+"/ok", time.Minute); status != 0 || out != "fine\n" {
		t.Errorf("curl of a 200: status %d, output %q", status, out)
	}

	steps, ok := transcript("$ echo a \\\n    b\na b\n$ sh -c 'echo 3 x; exit 3'\n3 …   (exit status 3)\n")
	if !ok || len(steps) != 2 || steps[0].command != "echo a \\\n    b" || steps[0].expected != "a b" ||
		steps[1].exit != 3 || steps[1].expected != "3 …" {
		t.Fatalf("transcript: %+v", steps)
	}
	for _, c := range []struct {
		expected, got string
		want          bool
	}{
		{"DOMAIN  FREE\nall  30", "DOMAIN FREE\nall    30\n", true},
		{"all 30", "all 31\n", false},
		{`{ "state": "active", … }`, "{ \"state\": \"active\",\n  \"count\": 3 }", true},
		{"one\ntwo", "one\n", false},
		{"ok", "ok\ndoctest: exit status 3 at line 1: x\n", true},
	} {
		if got := outputMatches(c.expected, c.got); got != c.want {
			t.Errorf("outputMatches(%q, %q) = %v", c.expected, c.got, got)
		}
	}

	md := "# t\n\n- item:\n\n  <!-- doctest: skip (because) -->\n\n      echo in a list\n\n<!-- doctest: bogus -->\n\n    echo x\n\n```yaml\na: 1\n```\n"
	if err := os.WriteFile(filepath.Join(dir, "t.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	bs, err := readBlocks(dir, "t.md")
	if err != nil || len(bs) != 3 {
		t.Fatalf("blocks %+v, %v", bs, err)
	}
	if bs[0].marker != "skip (because)" || bs[0].text != "echo in a list\n" || bs[0].line != 7 {
		t.Errorf("block in a list item: %+v", bs[0])
	}
	if err := checkMarker(bs[1]); err == nil || !strings.Contains(err.Error(), "doctest: skip (") {
		t.Errorf("an unknown marker: %v", err)
	}
	if bs[2].isShell() {
		t.Errorf("a yaml block counts as shell")
	}
}
