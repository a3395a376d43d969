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
}

// TestSystemdUnitsVerify runs `systemd-analyze verify` on every unit in
// configs/systemd, with ExecStart pointing at freshly built binaries in a
// temporary copy (verify checks that they exist and are executable), and
// fails on any complaint, warnings included. It also checks that every flag
// an ExecStart passes is one the binary accepts.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: install the Debian package systemd (.ci/run does)")
	}
	dir := t.TempDir()
	for _, u := range units {
		bin := filepath.Join(dir, "metalloc-"+u.binary)
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/"+u.binary).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", u.binary, err, out)
		}
		text, err := os.ReadFile(filepath.Join("systemd", u.file))
		if err != nil {
			t.Fatal(err)
		}
		unit := string(text)
		if !strings.Contains(unit, "ExecStart=/usr/local/bin/metalloc-"+u.binary+" ") {
			t.Fatalf("%s: ExecStart does not start /usr/local/bin/metalloc-%s", u.file, u.binary)
		}
		checkFlags(t, u.file, unit, bin)
		unit = strings.ReplaceAll(unit, "/usr/local/bin/", dir+"/")
		if err := os.WriteFile(filepath.Join(dir, u.file), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		// A template's instance is loaded from the template in the same
		// directory.
		cmd := exec.Command(analyze, "verify", filepath.Join(dir, u.verifyAs))
		cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER=")
		out, err := cmd.CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u.verifyAs, err, out)
		}
	}
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
	cfg, err := config.Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if grace := cfg.Conductor.ShutdownGrace; stop < grace+15*time.Second {
		t.Errorf("TimeoutStopSec=%v leaves too little beyond conductor.shutdown_grace=%v", stop, grace)
	}
}
