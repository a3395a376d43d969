package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/devstack"
)

// Peer suites: test suites nobody here wrote, run unchanged against a stack
// as `metalloc-manage dev up` starts it, from where a registry publishes
// them, pinned: gophercloud's through the Go module proxy,
// python-ironicclient's and osc-placement's from Debian's packages
// (scripts/test-deps.sh). Placement's gabbits, which no registry reachable
// here serves, are read from ../shared/conformance beside the checkout:
// without it their test skips, naming what is missing, unless
// METALLOC_TEST_REQUIRE_PEER_SUITES=1 (.ci/run), where it fails. Each suite
// must pass whole; a failure may only be excused by an entry of
// peerAllowList, which names the Ironic behaviour it waits for.

// peerAllowList maps "<suite>/<test>" to the Ironic behaviour metalloc does
// not have yet, for failures that are expected until it does. Every other
// failure fails the test, and an entry whose test passes is reported (it is
// stale). Empty: every suite passes whole.
var peerAllowList = map[string]string{}

// requirePeerSuitesEnv set to 1 (as .ci/run sets it) makes a peer suite
// that is not there fail its test instead of skipping it: CI never passes
// with a suite unrun.
const requirePeerSuitesEnv = "METALLOC_TEST_REQUIRE_PEER_SUITES"

// sharedConformance is ../shared/conformance/<sub> (or
// $METALLOC_TEST_SHARED_CONFORMANCE_DIR/<sub>): the suites no registry
// serves. When it is missing t skips, naming it and what it holds (what),
// or fails with requirePeerSuitesEnv set.
func sharedConformance(t *testing.T, sub, what string) string {
	t.Helper()
	dir := os.Getenv("METALLOC_TEST_SHARED_CONFORMANCE_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot(), "..", "shared", "conformance")
	}
	dir = filepath.Join(dir, sub)
	if _, err := os.Stat(dir); err != nil {
		msg := fmt.Sprintf("%s is not there (%v): it holds %s, which no registry reachable here serves; "+
			"put ../shared/conformance beside the checkout or set METALLOC_TEST_SHARED_CONFORMANCE_DIR", dir, err, what)
		if os.Getenv(requirePeerSuitesEnv) == "1" {
			t.Fatalf("%s=1: %s", requirePeerSuitesEnv, msg)
		}
		t.Skip(msg)
	}
	return dir
}

// suiteResult is how a test of a peer suite ended, with its output.
type suiteResult struct {
	status string // pass, fail, skip
	output string
}

// checkSuite fails t for each failed test of suite that the allow-list does
// not excuse, reports stale allow-list entries, logs the counts and
// requires at least want tests to have passed (the whole suite ran).
func checkSuite(t *testing.T, suite string, results map[string]suiteResult, want int) {
	t.Helper()
	passed, failed, skipped := 0, 0, 0
	names := make([]string, 0, len(results))
	for name := range results {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		r := results[name]
		why, allowed := peerAllowList[suite+"/"+name]
		switch r.status {
		case "pass":
			passed++
			if allowed {
				t.Errorf("%s/%s passes: drop its allow-list entry (%s)", suite, name, why)
			}
		case "skip":
			skipped++
		default:
			failed++
			if !allowed {
				t.Errorf("%s/%s failed:\n%s", suite, name, lastLines(r.output, 30))
			}
		}
	}
	t.Logf("%s: %d passed, %d failed, %d skipped, of %d", suite, passed, failed, skipped, len(results))
	require.GreaterOrEqual(t, passed, want, "%s: fewer tests passed than the suite has", suite)
}

// goTestResults runs a compiled Go test binary through test2json and
// returns each top-level test's result.
func goTestResults(t *testing.T, bin string, env []string) map[string]suiteResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "tool", "test2json", "-t", bin, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Logf("%s: %v", filepath.Base(bin), err) // failing tests exit 1; the results say which
	}
	results := map[string]suiteResult{}
	outputs := map[string]*strings.Builder{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct{ Action, Test, Output string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test == "" || strings.Contains(ev.Test, "/") {
			continue
		}
		if outputs[ev.Test] == nil {
			outputs[ev.Test] = &strings.Builder{}
		}
		switch ev.Action {
		case "output":
			outputs[ev.Test].WriteString(ev.Output)
		case "pass", "fail", "skip":
			results[ev.Test] = suiteResult{status: ev.Action, output: outputs[ev.Test].String()}
		}
	}
	require.NotEmpty(t, results, "%s ran no test:\n%s", filepath.Base(bin), lastLines(string(out), 30))
	return results
}

// gophercloudModule is the gophercloud release whose baremetal acceptance
// tests run, fetched through the Go module proxy into the module cache
// (go mod download); gophercloudSum is its hash (go.sum's h1: form, as
// sum.golang.org records it), checked so that the suite is the one pinned
// here whatever GOPROXY serves.
const (
	gophercloudModule = "github.com/gophercloud/gophercloud/v2@v2.9.0"
	gophercloudSum    = "h1:Y9OMrwKF9EDERcHFSOTpf/6XGoAI0yOxmsLmQki4LPM="
)

// gophercloudSource downloads gophercloudModule (a no-op once cached),
// checks its hash and returns its directory in the module cache (read
// only).
func gophercloudSource(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", gophercloudModule)
	cmd.Dir = t.TempDir() // outside any module: nothing's go.mod changes
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var mod struct{ Dir, Sum, Error string }
	_ = json.Unmarshal(out, &mod)
	require.NoError(t, err, "go mod download %s (through GOPROXY): %s", gophercloudModule, mod.Error)
	require.Equal(t, gophercloudSum, mod.Sum, "%s's hash", gophercloudModule)
	return mod.Dir
}

// buildGophercloudSuites compiles gophercloud v2.9.0's baremetal acceptance
// tests (noauth and httpbasic) into dir, from the module cache.
func buildGophercloudSuites(t *testing.T, dir string) (noauthBin, basicBin string) {
	t.Helper()
	src := gophercloudSource(t)
	for _, s := range []struct{ pkg, out string }{{"noauth", "gc-noauth.test"}, {"httpbasic", "gc-httpbasic.test"}} {
		cmd := exec.Command("go", "test", "-c", "-tags", "acceptance baremetal", "-o", filepath.Join(dir, s.out),
			"./internal/acceptance/openstack/baremetal/"+s.pkg+"/")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly") // its own go.mod and go.sum, as released
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "building gophercloud's %s suite:\n%s", s.pkg, out)
	}
	return filepath.Join(dir, "gc-noauth.test"), filepath.Join(dir, "gc-httpbasic.test")
}

// TestGophercloudBaremetalAcceptance runs gophercloud v2.9.0's baremetal
// acceptance tests (gophercloudModule, from the Go module proxy) against
// metalloc-api as an Ironic 2023.1 (OS_BRANCH=stable/2023.1: the range of
// microversions metalloc serves): the noauth suite without credentials,
// and the httpbasic suite with a user of the htpasswd file, where every
// test passes, and with a wrong password, where every test fails with 401.
func TestGophercloudBaremetalAcceptance(t *testing.T) {
	t.Parallel()
	noauthBin, basicBin := buildGophercloudSuites(t, t.TempDir())
	branch := "OS_BRANCH=stable/2023.1"

	t.Run("noauth", func(t *testing.T) {
		t.Parallel()
		stack, _ := startStack(t, 2)
		res := goTestResults(t, noauthBin, []string{"IRONIC_ENDPOINT=" + stack.APIURL + "/v1", "OS_USERNAME=admin", branch})
		checkSuite(t, "gophercloud-noauth", res, 6)
	})
	t.Run("httpbasic", func(t *testing.T) {
		t.Parallel()
		users := filepath.Join(t.TempDir(), "htpasswd")
		htpasswd(t, users, "operator", "op-pw")
		stack, _ := startStackOpts(t, 2, devstack.Options{Env: []string{
			"METALLOC_API_AUTH_STRATEGY=http_basic", "METALLOC_API_HTTP_BASIC_AUTH_USER_FILE=" + users,
		}})
		endpoint := "IRONIC_ENDPOINT=" + stack.APIURL + "/v1"
		res := goTestResults(t, basicBin, []string{endpoint, "OS_USERNAME=operator", "OS_PASSWORD=op-pw", branch})
		checkSuite(t, "gophercloud-httpbasic", res, 6)

		wrong := goTestResults(t, basicBin, []string{endpoint, "OS_USERNAME=operator", "OS_PASSWORD=wrong", branch})
		refused := 0
		for name, r := range wrong {
			switch {
			case r.status == "skip":
			case r.status == "pass":
				t.Errorf("gophercloud-httpbasic/%s passed with a wrong password", name)
			case !strings.Contains(r.output, "401"):
				t.Errorf("gophercloud-httpbasic/%s failed with a wrong password, but not with 401:\n%s", name, lastLines(r.output, 20))
			default:
				refused++
			}
		}
		t.Logf("gophercloud-httpbasic with a wrong password: %d of %d refused with 401", refused, len(wrong))
		require.GreaterOrEqual(t, refused, 6)
	})
}

// oscForkServer starts testdata/osc_forkserver.py for t (stopped when t
// ends) and returns its socket once it is ready.
func oscForkServer(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "osc.sock")
	cmd := exec.Command("/usr/bin/python3", filepath.Join(repoRoot(), "e2e", "testdata", "osc_forkserver.py"), "serve", sock)
	cmd.Env = append(os.Environ(), "PYTHONWARNINGS=ignore")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the openstack fork server did not start")
	require.Equal(t, "ready\n", line)
	return sock
}

// junitReport is the part of pytest's JUnit XML report (--junitxml) read
// here.
type junitReport struct {
	Suites []struct {
		Cases []struct {
			Class   string    `xml:"classname,attr"`
			Name    string    `xml:"name,attr"`
			Failure *junitMsg `xml:"failure"`
			Error   *junitMsg `xml:"error"`
			Skipped *junitMsg `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitMsg struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// pytestResults reads the JUnit XML report pytest wrote to path: each
// test's result, by the name id gives its class ("module.Class") and name.
func pytestResults(path string, id func(class, name string) string) (map[string]suiteResult, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep junitReport
	if err := xml.Unmarshal(raw, &rep); err != nil {
		return nil, err
	}
	results := map[string]suiteResult{}
	for _, s := range rep.Suites {
		for _, c := range s.Cases {
			r := suiteResult{status: "pass"}
			switch {
			case c.Failure != nil:
				r = suiteResult{status: "fail", output: c.Failure.Message + "\n" + c.Failure.Text}
			case c.Error != nil:
				r = suiteResult{status: "fail", output: c.Error.Message + "\n" + c.Error.Text}
			case c.Skipped != nil:
				r.status = "skip"
			}
			results[id(c.Class, c.Name)] = r
		}
	}
	return results, nil
}

// ironicclientFunctional is where Debian's python3-ironicclient ships its
// functional tests; scripts/test-deps.sh installs it.
const ironicclientFunctional = "/usr/lib/python3/dist-packages/ironicclient/tests/functional"

// TestIronicclientFunctional runs python-ironicclient 5.0.1's functional
// tests (108: the real `openstack baremetal ...` commands against a live
// endpoint, checking their output) against metalloc-api with noauth, from
// Debian's python3-ironicclient. Every test must pass; the test fails,
// never skips, without them.
func TestIronicclientFunctional(t *testing.T) {
	t.Parallel()
	_, err := os.Stat(ironicclientFunctional)
	require.NoError(t, err, "python3-ironicclient's functional tests (Debian's python3-ironicclient) are needed")
	stack, _ := startStack(t, 2)

	work := t.TempDir()
	bin := filepath.Join(work, ".tox", "functional", "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	// The suite runs `openstack` ~500 times; a fork server imports the
	// CLI once (testdata/osc_forkserver.py), and the suite's openstack
	// hands each run to it.
	sock := oscForkServer(t)
	forkserver := filepath.Join(repoRoot(), "e2e", "testdata", "osc_forkserver.py")
	require.NoError(t, os.WriteFile(filepath.Join(bin, "openstack"),
		[]byte("#!/bin/sh\nexec /usr/bin/python3 -S "+shellQuote(forkserver)+" client "+shellQuote(sock)+" \"$@\"\n"), 0o755))
	conf := filepath.Join(work, "test.conf")
	require.NoError(t, os.WriteFile(conf, []byte("[functional]\nauth_strategy = noauth\nironic_url = "+stack.APIURL+"\n"), 0o644))
	report := filepath.Join(work, "report.xml")

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
		"--junitxml="+report, ironicclientFunctional)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "IRONICCLIENT_TEST_CONFIG="+conf, "PYTHONWARNINGS=ignore", "OS_CLOUD=",
		"OS_CLIENT_CONFIG_FILE=/dev/null")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest: %v\n%s", err, lastLines(string(out), 15))

	results, err := pytestResults(report, func(class, name string) string {
		return class[strings.LastIndex(class, ".")+1:] + "." + name
	})
	require.NoError(t, err, "pytest wrote no report")
	checkSuite(t, "ironicclient-functional", results, 108)
}
