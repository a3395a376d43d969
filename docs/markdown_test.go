package docs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// block is one code block of a Markdown file.
type block struct {
	file string // relative to the repository root
	line int    // 1-based line of its first content line
	lang string // a fenced block's info string ("" for an indented block)
	text string
	// marker is the doctest marker right before the block ("" when none):
	// the text after "doctest:" of an HTML comment <!-- doctest: ... -->.
	marker string
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// shellLangs are the info strings of blocks that hold shell commands; an
// indented block (no info string) counts as shell too.
var shellLangs = []string{"", "sh", "shell", "bash", "console"}

// isShell reports whether TestDocs must run b or see it marked.
func (b block) isShell() bool { return slices.Contains(shellLangs, b.lang) }

// docFiles are the Markdown files whose blocks TestDocs runs, in running
// order, which is the reading order: README.md, the guide's index
// (docs/README.md), the pages in the order the index links them, then any
// page of docs/ it does not link, by name (TestDocIndex says which).
func docFiles(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	index, err := os.ReadFile(filepath.Join(root, "docs", "README.md"))
	if err != nil {
		return nil, err
	}
	out := []string{"README.md", "docs/README.md"}
	for _, m := range indexLinkRE.FindAllStringSubmatch(string(index), -1) {
		rel := "docs/" + m[1]
		if !slices.Contains(out, rel) && exists(filepath.Join(root, rel)) {
			out = append(out, rel)
		}
	}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		if !slices.Contains(out, rel) {
			out = append(out, rel)
		}
	}
	return out, nil
}

// indexLinkRE matches a link of the guide's index to one of its pages.
var indexLinkRE = regexp.MustCompile(`\]\(([a-z0-9-]+\.md)(?:#[^)]*)?\)`)

// TestDocIndex: every page of docs/ is linked from the guide's index, so
// that its reading order is its running order.
func TestDocIndex(t *testing.T) {
	t.Parallel()
	index, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(repoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if name != "README.md" && !strings.Contains(string(index), "]("+name+")") {
			t.Errorf("docs/README.md does not link %s: add it to the index, where a reader should read it", name)
		}
	}
}

var markerRE = regexp.MustCompile(`(?s)^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$`)

// readBlocks returns the code blocks of the Markdown file rel under root,
// as CommonMark (goldmark) parses them, so that a block inside a list item
// counts as GitHub shows it.
func readBlocks(root, rel string) ([]block, error) {
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	doc := goldmark.DefaultParser().Parse(text.NewReader(src))
	var out []block
	err = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		var lang string
		switch v := n.(type) {
		case *ast.FencedCodeBlock:
			lang = string(v.Language(src))
		case *ast.CodeBlock:
		default:
			return ast.WalkContinue, nil
		}
		lines := n.Lines()
		var buf bytes.Buffer
		for i := range lines.Len() {
			seg := lines.At(i)
			buf.Write(seg.Value(src))
		}
		b := block{file: rel, lang: lang, text: buf.String()}
		if lines.Len() > 0 {
			b.line = bytes.Count(src[:lines.At(0).Start], []byte("\n")) + 1
		}
		if prev, ok := n.PreviousSibling().(*ast.HTMLBlock); ok {
			var h bytes.Buffer
			for i := range prev.Lines().Len() {
				seg := prev.Lines().At(i)
				h.Write(seg.Value(src))
			}
			if prev.HasClosure() {
				h.Write(prev.ClosureLine.Value(src))
			}
			if m := markerRE.FindStringSubmatch(h.String()); m != nil {
				b.marker = m[1]
			}
		}
		out = append(out, b)
		return ast.WalkSkipChildren, nil
	})
	return out, err
}

// marker kinds, the text after "doctest:" (docs/development.md).
var (
	skipRE         = regexp.MustCompile(`^skip \((.+)\)$`)
	ignoreOutputRE = regexp.MustCompile(`^ignore output \((.+)\)$`)
	runByRE        = regexp.MustCompile(`^run by (Test\w+)$`)
)

// markerHelp is what a failure about a block tells its author.
const markerHelp = `Every shell block of README.md and docs/*.md is run by TestDocs (docs/doctest_test.go) against a stack started as make run starts it, in order. Fix the example so that it works as written, or put one of these on the line right before the block (docs/development.md):
  <!-- doctest: skip (why it cannot run here, e.g. needs systemd as PID 1) -->
  <!-- doctest: ignore output (why the output shown is not what it prints) -->   (transcripts: the commands still run)
  <!-- doctest: run by TestName -->   (a test of package docs runs it)
A block that is not shell gets a language: ` + "```yaml, ```json, ```text."

// checkMarker returns an error when b's marker is malformed.
func checkMarker(b block) error {
	if b.marker == "" {
		return nil
	}
	if !b.isShell() {
		return fmt.Errorf("%s: a doctest marker on a %q block, which is not run", b, b.lang)
	}
	for _, re := range []*regexp.Regexp{skipRE, ignoreOutputRE, runByRE} {
		if re.MatchString(b.marker) {
			return nil
		}
	}
	return fmt.Errorf("%s: unknown doctest marker %q.\n%s", b, b.marker, markerHelp)
}

// step is one command of a transcript block and what it should print.
type step struct {
	command  string
	expected string // "" when the transcript shows no output
	exit     int    // the exit status the transcript gives, "(exit status N)"
}

var exitRE = regexp.MustCompile(`\s*\(exit status (\d+)\)\s*$`)

// transcript splits a block whose lines start with "$ " into commands (with
// their continuation lines, after a trailing backslash) and the output shown
// under each; ok is false for a plain script.
func transcript(t string) (steps []step, ok bool) {
	lines := strings.Split(strings.TrimRight(t, "\n"), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "$ ") {
		return nil, false
	}
	var out []string
	flush := func() {
		if len(steps) > 0 {
			exp := strings.Join(out, "\n")
			if m := exitRE.FindStringSubmatch(exp); m != nil {
				fmt.Sscan(m[1], &steps[len(steps)-1].exit)
				exp = exp[:len(exp)-len(m[0])]
			}
			steps[len(steps)-1].expected = strings.TrimSpace(exp)
		}
		out = nil
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "$ ") {
			out = append(out, l)
			continue
		}
		flush()
		cmd := strings.TrimPrefix(l, "$ ")
		for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
			i++
			cmd += "\n" + lines[i]
		}
		steps = append(steps, step{command: cmd})
	}
	flush()
	return steps, true
}

// outputMatches compares what a command printed with what a transcript
// shows: runs of white space are equal, "…" stands for any text (also
// across lines), and the lines TestDocs adds itself (a failed command's
// "doctest: exit status ...") do not count.
func outputMatches(expected, got string) bool {
	var kept []string
	for _, l := range strings.Split(got, "\n") {
		if !strings.HasPrefix(l, "doctest: exit status ") {
			kept = append(kept, l)
		}
	}
	var re strings.Builder
	re.WriteString(`(?s)^\s*`)
	for i, part := range strings.Split(expected, "…") {
		if i > 0 {
			re.WriteString(`.*?`)
		}
		for j, w := range strings.Fields(part) {
			if j > 0 {
				re.WriteString(`\s+`)
			}
			re.WriteString(regexp.QuoteMeta(w))
		}
		if strings.HasSuffix(part, " ") || strings.HasSuffix(part, "\n") {
			re.WriteString(`\s*`)
		}
	}
	re.WriteString(`\s*$`)
	return regexp.MustCompile(re.String()).MatchString(strings.Join(kept, "\n"))
}
