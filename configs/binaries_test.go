package configs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/metalloc/metalloc/config"
)

// runBin runs a built binary with args and extra environment and returns
// its combined output and exit status.
func runBin(t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(buildBinaries(t), bin), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("%s %v: %v", bin, args, err)
	return "", 0
}

// TestBinariesFlagsAndVersion: every binary takes --version (version,
// commit, build date, Go) and a --section.key flag for every key it reads
// (metalloc-api's --api.max_wait, --log.level, --api.public_endpoint were
// "unknown flag"); an unknown flag or argument is exit 2.
func TestBinariesFlagsAndVersion(t *testing.T) {
	for _, b := range config.Binaries {
		out, code := runBin(t, string(b), nil, "--version")
		if code != 0 || !regexp.MustCompile(`^`+string(b)+` \S+ \(commit \S+, built \S+, go\S+ \S+/\S+\)\n$`).MatchString(out) {
			t.Errorf("%s --version: exit %d, %q", b, code, out)
		}
		// metalloc-manage's --help lists the flags of what each command
		// reads; --help-all every one.
		helpFlag := "--help"
		if b == config.BinaryManage {
			helpFlag = "--help-all"
		}
		help, code := runBin(t, string(b), nil, helpFlag)
		if code != 0 {
			t.Fatalf("%s %s: exit %d\n%s", b, helpFlag, code, help)
		}
		for _, k := range config.Keys() {
			has := strings.Contains(help, "--"+k.Flag()+" ")
			if has != k.ReadBy(b) {
				t.Errorf("%s %s lists --%s: %v, reads the key: %v", b, helpFlag, k.Flag(), has, k.ReadBy(b))
			}
		}
		out, code = runBin(t, string(b), nil, "--no-such-flag")
		if code != 2 || !strings.Contains(out, "unknown flag: --no-such-flag") {
			t.Errorf("%s --no-such-flag: exit %d, %q", b, code, out)
		}
	}
	out, code := runBin(t, "metalloc-api", nil, "extra")
	if code != 2 || !strings.Contains(out, `unexpected argument "extra"`) {
		t.Errorf("metalloc-api extra: exit %d, %q", code, out)
	}
}

// TestDaemonsRefuseUnknownKeys: a daemon stops at start-up, before it
// connects anywhere, on an unknown key in its file or an unknown METALLOC_
// variable, with exit status 78 and the nearest valid key named; a
// misspelt section (conductr:) is no longer ignored.
func TestDaemonsRefuseUnknownKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metalloc.yaml")
	if err := os.WriteFile(path, []byte("api:\n  max_wiat: 5s\nconductr:\n  workers: 4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, b := range []config.Binary{config.BinaryAPI, config.BinaryConductor, config.BinaryPlacement} {
		out, code := runBin(t, string(b), []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none"}, "--config", path)
		if code != 78 || !strings.Contains(out, "unknown key api.max_wiat; did you mean api.max_wait?") ||
			!strings.Contains(out, "unknown key conductr.workers; did you mean conductor.workers?") {
			t.Errorf("%s --config (misspelt keys): exit %d\n%s", b, code, out)
		}
		out, code = runBin(t, string(b), []string{"METALLOC_LOG_LEVL=debug"})
		if code != 78 || !strings.Contains(out, "unknown environment variable METALLOC_LOG_LEVL; did you mean METALLOC_LOG_LEVEL (key log.level)?") {
			t.Errorf("%s with METALLOC_LOG_LEVL: exit %d\n%s", b, code, out)
		}
	}
}

// TestConfigCheckAndShow: `metalloc-manage config check` lists every
// problem of a file and exits 1, or exits 0; `config show` prints each
// key's value and source with secrets masked.
func TestConfigCheckAndShow(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("api:\n  max_wiat: 5s\n  auth_strategy: kerberos\nlog:\n  level: loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runBin(t, "metalloc-manage", nil, "config", "check", "--config", bad)
	if code != 1 || !strings.Contains(out, "problem: unknown key api.max_wiat; did you mean api.max_wait? (in "+bad+")\n") ||
		!strings.Contains(out, `problem: api.auth_strategy: "kerberos" is not one of noauth, http_basic, keystone`) ||
		!strings.Contains(out, `problem: log.level: "loud" is not one of debug, info, warn, error`) ||
		!strings.Contains(out, "3 problem(s) in the configuration\n") {
		t.Errorf("config check %s: exit %d\n%s", bad, code, out)
	}
	out, code = runBin(t, "metalloc-manage", nil, "config", "check", "--config", "metalloc.yaml")
	if code != 0 || !strings.HasSuffix(out, "configuration OK: metalloc.yaml\n") {
		t.Errorf("config check metalloc.yaml: exit %d\n%s", code, out)
	}
	out, code = runBin(t, "metalloc-manage", []string{"METALLOC_KEYSTONE_PASSWORD=hunter2"},
		"config", "show", "--config", "metalloc.yaml", "--conductor.workers", "4")
	for _, re := range []string{
		`(?m)^database\.url +postgres://metalloc@127\.0\.0\.1:5432/metalloc\?sslmode=disable +file metalloc\.yaml$`,
		`(?m)^keystone\.password +\*\*\*\* +env METALLOC_KEYSTONE_PASSWORD$`,
		`(?m)^conductor\.workers +4 +flag --conductor\.workers$`,
		`(?m)^placement_backend\.cpu_allocation_ratio +\(unset\) +default$`,
	} {
		if code != 0 || !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("config show: exit %d, no %s in\n%s", code, re, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Error("config show printed a password")
	}
}

// TestEveryMetallocVariableIsKnown: every METALLOC_ name the repository
// mentions (docs, scripts, units, code) is a key's variable or one the
// loader knows is not configuration, so nobody sets a variable that
// the binaries then refuse.
func TestEveryMetallocVariableIsKnown(t *testing.T) {
	envs := map[string]bool{}
	for _, k := range config.Keys() {
		envs[k.Env()] = true
	}
	re := regexp.MustCompile(`METALLOC_[A-Z0-9][A-Z0-9_]*[A-Z0-9]`)
	seen := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// config and configs define the rule and test misspelt names.
			if name := d.Name(); name == ".git" || name == "bin" || name == "node_modules" ||
				path == "../config" || path == "../configs" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh", ".service", ".yaml", ".yml", ".env", "":
		default:
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, name := range re.FindAllString(string(text), -1) {
			if !envs[name] && !config.KnownOtherEnv(name) && !seen[name] {
				seen[name] = true
				t.Errorf("%s mentions %s, which is no key's variable (config.Keys) nor a known other one (config.KnownOtherEnv)", path, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
