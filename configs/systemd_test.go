// Package configs holds no code: only the shipped configuration (the
// documented metalloc.yaml, the systemd units) and tests that check it.
package configs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/metalloc/metalloc/config"
)

// units maps each shipped unit file to the unit name verified (a template is
// verified as one of its instances) and the binary it starts.
var units = []struct{ file, verifyAs, binary string }{
	{"metalloc-api.service", "metalloc-api.service", "api"},
	{"metalloc-conductor@.service", "metalloc-conductor@1.service", "conductor"},
	{"metalloc-placement.service", "metalloc-placement.service", "placement"},
}

// TestSystemdUnitsVerify runs `systemd-analyze verify` on every unit in
// configs/systemd, with ExecStart pointing at freshly built binaries in a
// temporary copy (verify checks that they exist and are executable), and
// fails on any complaint about metalloc's units, warnings included;
// complaints about other units the machine has (verify loads the units
// ours are ordered after, and theirs) are not ours to fix and only logged.
// It also checks that every unit is Type=notify with a watchdog and that
// every flag an ExecStart passes is one the binary accepts.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze := systemdAnalyze(t)
	bins := buildBinaries(t)
	dir := t.TempDir()
	files, _ := filepath.Glob("systemd/*.service")
	if len(files) != len(units) {
		t.Errorf("configs/systemd has %d units, the test knows %d", len(files), len(units))
	}
	for _, u := range units {
		bin := filepath.Join(bins, "metalloc-"+u.binary)
		text, err := os.ReadFile(filepath.Join("systemd", u.file))
		if err != nil {
			t.Fatal(err)
		}
		unit := string(text)
		if !strings.Contains(unit, "ExecStart=/usr/bin/metalloc-"+u.binary+" ") {
			t.Fatalf("%s: ExecStart does not start /usr/bin/metalloc-%s", u.file, u.binary)
		}
		for _, line := range []string{"Type=notify", "NotifyAccess=main", "WatchdogSec=30s", "RestartPreventExitStatus=2 78"} {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).MatchString(unit) {
				t.Errorf("%s: no %s", u.file, line)
			}
		}
		checkFlags(t, u.file, unit, bin)
		unit = strings.ReplaceAll(unit, "/usr/bin/", bins+"/")
		if err := os.WriteFile(filepath.Join(dir, u.file), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		// A template's instance is loaded from the template in the same
		// directory.
		ours, others := verify(t, analyze, filepath.Join(dir, u.verifyAs))
		if len(ours) > 0 {
			t.Errorf("systemd-analyze verify %s:\n%s", u.verifyAs, strings.Join(ours, "\n"))
		}
		if len(others) > 0 {
			t.Logf("systemd-analyze verify %s, about other units (ignored):\n%s", u.verifyAs, strings.Join(others, "\n"))
		}
	}
}

// TestSystemdVerifyIgnoresOtherUnits: a warning about a unit that is not
// metalloc's (here a broken network-online.target wanting a broken
// keystone service, as Debian's keystone.service once made
// systemd-analyze warn on a CI machine) does not fail the check, a
// warning about ours does.
func TestSystemdVerifyIgnoresOtherUnits(t *testing.T) {
	analyze := systemdAnalyze(t)
	bins := buildBinaries(t)
	other := t.TempDir()
	for name, text := range map[string]string{
		"network-online.target": "[Unit]\nDescription=broken\nBogusKey=1\nWants=keystone-test.service\n",
		"keystone-test.service": "[Unit]\nDescription=broken\n[Service]\nExecStart=/bin/true\nBogus=2\n",
	} {
		if err := os.WriteFile(filepath.Join(other, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text, err := os.ReadFile("systemd/metalloc-placement.service")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	unit := strings.ReplaceAll(string(text), "/usr/bin/", bins+"/")
	path := filepath.Join(dir, "metalloc-placement.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	env := "SYSTEMD_UNIT_PATH=" + other + ":"
	ours, others := verify(t, analyze, path, env)
	if len(ours) > 0 || len(others) == 0 {
		t.Fatalf("ours %q, others %q: want none of ours, the broken units' warnings among the others", ours, others)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(unit, "[Service]\n", "[Service]\nBogusOfOurs=1\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if ours, _ = verify(t, analyze, path, env); len(ours) == 0 {
		t.Fatal("a warning about metalloc-placement.service was not reported as ours")
	}
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: install the Debian package systemd (.ci/run does)")
	}
	return analyze
}

// verify runs systemd-analyze verify on the unit file at path and splits
// its complaints into those about metalloc's units and binaries (lines
// naming metalloc-...) and the others. A failing exit status with no
// complaint of ours is one of ours too.
func verify(t *testing.T, analyze, path string, env ...string) (ours, others []string) {
	t.Helper()
	cmd := exec.Command(analyze, "verify", path)
	cmd.Env = append(append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER="), env...)
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case line == "":
		case strings.Contains(line, "metalloc-"):
			ours = append(ours, line)
		default:
			others = append(others, line)
		}
	}
	if err != nil && len(ours) == 0 {
		ours = append(ours, "systemd-analyze verify: "+err.Error())
	}
	return ours, others
}

var flagRE = regexp.MustCompile(`\s(--[a-z][a-z0-9._-]*)`)

// checkFlags fails when the unit's ExecStart passes a flag `bin --help` does
// not list.
func checkFlags(t *testing.T, file, unit, bin string) {
	t.Helper()
	help, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", bin, err, help)
	}
	for _, line := range strings.Split(unit, "\n") {
		if !strings.HasPrefix(line, "ExecStart=") {
			continue
		}
		for _, m := range flagRE.FindAllStringSubmatch(line, -1) {
			if !strings.Contains(string(help), m[1]+" ") {
				t.Errorf("%s: ExecStart passes %s, which %s does not accept", file, m[1], filepath.Base(bin))
			}
		}
	}
}

// TestConductorUnitOutlastsShutdownGrace checks that systemd waits longer
// than the conductor's default shutdown grace before SIGKILL, so that a
// clean stop can finish or release its allocations and mark itself offline.
func TestConductorUnitOutlastsShutdownGrace(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("systemd", "metalloc-conductor@.service"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)s$`).FindStringSubmatch(string(text))
	if m == nil {
		t.Fatal("metalloc-conductor@.service: no TimeoutStopSec=<n>s")
	}
	stop, _ := time.ParseDuration(m[1] + "s")
	if grace := config.DefaultConductorShutdownGrace; stop < grace+15*time.Second {
		t.Errorf("TimeoutStopSec=%v leaves too little beyond conductor.shutdown_grace=%v", stop, grace)
	}
}

// TestAPIUnitsOutlastShutdown checks that systemd waits longer than the
// APIs' default shutdown delay and grace, and the 5 s of last answers,
// before SIGKILL, so that a drain finishes the requests in flight.
func TestAPIUnitsOutlastShutdown(t *testing.T) {
	for _, unit := range []string{"metalloc-api.service", "metalloc-placement.service"} {
		text, err := os.ReadFile(filepath.Join("systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)s$`).FindStringSubmatch(string(text))
		if m == nil {
			t.Fatalf("%s: no TimeoutStopSec=<n>s", unit)
		}
		stop, _ := time.ParseDuration(m[1] + "s")
		if need := config.DefaultShutdownDelay + config.DefaultShutdownGrace + 5*time.Second; stop <= need {
			t.Errorf("%s: TimeoutStopSec=%v leaves nothing beyond shutdown_delay, shutdown_grace and the last answers (%v)", unit, stop, need)
		}
	}
}
