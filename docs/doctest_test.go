package docs

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metalloc/metalloc/db/dbtest"
)

// workspace is a directory laid out as a reader's: workspace/repo holds
// links to the repository's files and a bin/ of freshly built binaries
// (what make build leaves), and nothing beside it: what the documentation
// uses lives in the repository (a plain clone has it). Blocks run in
// workspace/repo, so what they write stays out of the checkout.
var workspace string

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if workspace != "" {
		os.RemoveAll(workspace)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "metalloc-docs-")
	if err != nil {
		return 0, err
	}
	workspace = dir
	repo := filepath.Join(dir, "repo")
	if err := os.MkdirAll(filepath.Join(repo, "bin"), 0o755); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(repoRoot())
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if e.Name() == "bin" || e.Name() == ".git" {
			continue
		}
		if err := os.Symlink(filepath.Join(repoRoot(), e.Name()), filepath.Join(repo, e.Name())); err != nil {
			return 0, err
		}
	}
	for _, c := range []string{"api", "conductor", "placement", "manage"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(repo, "bin", "metalloc-"+c), "./cmd/"+c)
		cmd.Dir = repoRoot()
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("building metalloc-%s: %w", c, err)
		}
	}
	return m.Run(), nil
}

// repoRoot is the module root (the directory above this file's).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// allBlocks reads the blocks of every documentation file, in running order.
func allBlocks(t *testing.T) []block {
	t.Helper()
	files, err := docFiles(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	var all []block
	for _, f := range files {
		bs, err := readBlocks(repoRoot(), f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, bs...)
	}
	return all
}

// TestDocMarkers checks the doctest markers without running anything: a
// malformed marker, a marker on a block that is not shell, or a "run by"
// naming a test this package does not have fails.
func TestDocMarkers(t *testing.T) {
	t.Parallel()
	src := testSources(t)
	var runs []string
	for _, b := range allBlocks(t) {
		if err := checkMarker(b); err != nil {
			t.Error(err)
		}
		if b.isShell() && !skipRE.MatchString(b.marker) && !runByRE.MatchString(b.marker) {
			runs = append(runs, b.String())
		}
		if m := runByRE.FindStringSubmatch(b.marker); m != nil && !strings.Contains(src, "func "+m[1]+"(t *testing.T)") {
			t.Errorf("%s: marked as run by %s, which package docs does not have", b, m[1])
		}
	}
	t.Logf("blocks TestDocs runs: %s", strings.Join(runs, ", "))
}

// testSources is the text of this package's test files.
func testSources(t *testing.T) string {
	files, err := filepath.Glob(filepath.Join(repoRoot(), "docs", "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	return all.String()
}

// documentedPorts are the addresses the documentation uses for make run's
// processes. TestDocs starts its stack on free ports (the machine may run
// other stacks) and replaces these in every command before running it:
// the API, metalloc-placement and the first conductor's metrics listener
// by its stack's, the others by free ports of their own.
var documentedPorts = []string{"127.0.0.1:6385", "127.0.0.1:8778", "127.0.0.1:9464", "127.0.0.1:9465", "127.0.0.1:9466"}

// TestDocs runs every shell block of README.md and docs/*.md in reading
// order (docFiles), in one bash session, against a stack started as make
// run starts it (dev up with examples/dc1-nodes.yaml) on a database of its
// own, in a workspace laid out as a checkout after make build. A plain
// block must exit 0 (curl fails on an HTTP error status); a transcript's
// commands (lines starting with "$ ") must exit with the status shown
// ("(exit status N)", else 0) and print what is shown under them
// (docs/development.md, "Tests and tools"). Blocks marked skip are counted
// with their reasons.
func TestDocs(t *testing.T) {
	t.Parallel()
	blocks := allBlocks(t)
	repo := filepath.Join(workspace, "repo")
	scratch := t.TempDir()
	ports := map[string]string{}
	for _, p := range documentedPorts {
		ports[p] = freeAddr(t)
	}
	envFile := filepath.Join(scratch, "dev.env")
	stack := startDevUp(t, repo, envFile, ports)
	// The first conductor's metrics listener is the one 9464 stands for.
	ports["127.0.0.1:9464"] = stack.conductorMetrics

	home := filepath.Join(scratch, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	sh := startShell(t, repo, scratch, readerEnv(home))
	defer sh.Close()
	// docs/getting-started.md's "A second shell" block points this shell at the stack;
	// dev env finds it through the default dev.env, next to the binaries.
	if err := os.Symlink(envFile, filepath.Join(repo, "bin", "dev.env")); err != nil {
		t.Fatal(err)
	}

	var run, skipped int
	reasons := map[string][]string{}
	for _, b := range blocks {
		if !b.isShell() {
			continue
		}
		if err := checkMarker(b); err != nil {
			t.Fatal(err)
		}
		if m := skipRE.FindStringSubmatch(b.marker); m != nil {
			skipped++
			reasons[m[1]] = append(reasons[m[1]], b.String())
			continue
		}
		if m := runByRE.FindStringSubmatch(b.marker); m != nil {
			skipped++
			reasons["run by "+m[1]] = append(reasons["run by "+m[1]], b.String())
			continue
		}
		run++
		text := substitute(b.text, ports)
		steps, isTranscript := transcript(text)
		if !isTranscript {
			out, status := sh.run(text, 5*time.Minute)
			if status != 0 {
				t.Fatalf("%s: the block failed (exit status %d):\n%s\noutput:\n%s\n%s", b, status, indent(b.text), out, markerHelp)
			}
			continue
		}
		checkOutput := !ignoreOutputRE.MatchString(b.marker)
		for _, st := range steps {
			out, status := sh.run(st.command, 5*time.Minute)
			if status != st.exit {
				t.Fatalf("%s: $ %s\nexited with status %d, the transcript says %d; output:\n%s\n%s", b, st.command, status, st.exit, out, markerHelp)
			}
			if checkOutput && st.expected != "" && !outputMatches(st.expected, out) {
				t.Fatalf("%s: $ %s\nprinted:\n%s\nthe transcript shows (white space runs are equal, … stands for any text):\n%s\n%s",
					b, st.command, indent(out), indent(st.expected), markerHelp)
			}
		}
	}
	var summary []string
	for r, where := range reasons {
		summary = append(summary, fmt.Sprintf("  %d: %s (%s)", len(where), r, strings.Join(where, ", ")))
	}
	slices.Sort(summary)
	t.Logf("documentation blocks: %d run, %d not run here:\n%s", run, skipped, strings.Join(summary, "\n"))
}

// devUp is the stack TestDocs runs against.
type devUp struct {
	conductorMetrics string // the first conductor's metrics address
}

// startDevUp runs bin/metalloc-manage dev up in repo as make run does (its
// default NODES, examples/dc1-nodes.yaml), on its own database and the free
// ports that stand for the documented API and metalloc-placement ports
// (make run's API_PORT and PLACEMENT_PORT), and waits until it has
// written envFile. Cleanup stops it with SIGINT, as Ctrl-C does.
func startDevUp(t *testing.T, repo, envFile string, ports map[string]string) devUp {
	t.Helper()
	cmd := exec.Command(filepath.Join(repo, "bin", "metalloc-manage"), "dev", "up",
		"--nodes", "examples/dc1-nodes.yaml", "--api-port", portOf(ports["127.0.0.1:6385"]),
		"--placement-port", portOf(ports["127.0.0.1:8778"]), "--env-file", envFile)
	cmd.Dir = repo
	cmd.Env = append(readerEnv(t.TempDir()), "DATABASE_URL="+dbtest.NewURL(t))
	logPath := filepath.Join(t.TempDir(), "dev-up.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
		}
		logFile.Close()
	})
	deadline := time.Now().Add(5 * time.Minute)
	for !exists(envFile) {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("dev up exited (%v) before it was up:\n%s", err, b)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("dev up was not up within 5 minutes:\n%s", b)
		}
	}
	f, err := os.Open(envFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var s devUp
	re := regexp.MustCompile(`^# conductor conductor-1 metrics: http://([^/]+)/metrics$`)
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			s.conductorMetrics = m[1]
		}
	}
	if s.conductorMetrics == "" {
		t.Fatalf("%s names no conductor-1 metrics address", envFile)
	}
	return s
}

// readerEnv is the environment of a reader's fresh shell: this process's
// without DATABASE_URL and METALLOC_ and OS_ variables (the documentation
// must set what it uses), with HOME as given.
func readerEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || k == "HOME" || strings.HasPrefix(k, "METALLOC_") || strings.HasPrefix(k, "OS_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "LC_ALL=C.UTF-8")
}

// substitute replaces the documented addresses by the test's.
func substitute(s string, ports map[string]string) string {
	for from, to := range ports {
		s = strings.ReplaceAll(s, from, to)
	}
	return s
}

// portOf is addr's port.
func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
