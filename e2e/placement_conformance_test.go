package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/db/embedded"
	"github.com/metalloc/metalloc/devstack"
)

// conformanceDir is Placement's upstream functional suite (its gabbits,
// which no registry reachable here serves) and its runner, kept outside
// the repository: $METALLOC_PLACEMENT_CONFORMANCE_DIR, else
// ../shared/conformance/placement, whose absence skips the test (fails
// it with METALLOC_TEST_REQUIRE_PEER_SUITES=1, see sharedConformance).
func conformanceDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("METALLOC_PLACEMENT_CONFORMANCE_DIR")
	if dir == "" {
		dir = sharedConformance(t, "placement", "Placement 8.0.0's gabbits (gabbits-8.0.0) and their runner (run_gabbi.py)")
	}
	_, err := os.Stat(filepath.Join(dir, "run_gabbi.py"))
	require.NoError(t, err, "Placement's upstream suite: %s has no run_gabbi.py", dir)
	return dir
}

// placementReset empties metalloc-placement's tables (the runner's
// RESET_CMD before each file): providers, inventories, allocations,
// consumers, custom classes and traits.
const placementReset = `TRUNCATE placement.allocations, placement.consumers, placement.resource_provider_aggregates,
 placement.resource_provider_traits, placement.inventories, placement.resource_providers CASCADE;
 DELETE FROM placement.resource_classes WHERE name LIKE 'CUSTOM_%';
 DELETE FROM placement.traits WHERE name LIKE 'CUSTOM_%';`

// gabbiReport is the part of run_gabbi.py's JSON report read here.
type gabbiReport struct {
	Files []struct {
		File    string `json:"file"`
		Status  string `json:"status"`
		Total   int    `json:"total"`
		Passed  int    `json:"passed"`
		Failed  int    `json:"failed"`
		Skipped int    `json:"skipped"`
		Tests   []struct {
			Name   string  `json:"name"`
			Status string  `json:"status"`
			Detail *string `json:"detail"`
		} `json:"tests"`
	} `json:"files"`
}

// Placement's own functional suite (the gabbi files of Placement 8.0.0, run
// by the runner beside them with Debian's python3-gabbi) against
// metalloc-placement, configured as each profile needs: default (1000
// tests; the reference OpenStack Placement passes 993 on PostgreSQL),
// open-policy (the policy file of configs/placement-open-policy.yaml) and
// secure-rbac (enforce_scope and enforce_new_defaults). Each profile must
// pass every test it has: the count reached is the whole suite.
func TestPlacementUpstreamSuite(t *testing.T) {
	dir := conformanceDir(t)
	pgBin, err := embedded.EnsureBinaries(context.Background(), zaptest.NewLogger(t))
	require.NoError(t, err)
	for _, p := range []struct {
		profile string
		env     []string
		want    int
	}{
		{"default", nil, 1000},
		{"open-policy", []string{"METALLOC_PLACEMENT_POLICY_FILE=" + filepath.Join(repoRoot(), "configs", "placement-open-policy.yaml")}, 41},
		{"secure-rbac", []string{"METALLOC_PLACEMENT_ENFORCE_SCOPE=true", "METALLOC_PLACEMENT_ENFORCE_NEW_DEFAULTS=true"}, 187},
	} {
		t.Run(p.profile, func(t *testing.T) {
			t.Parallel()
			dbURL := dbtest.NewURL(t)
			stack, err := devstack.Start(context.Background(), devstack.Options{PlacementOnly: true,
				BinDir: binDir, DatabaseURL: dbURL, LogDir: t.TempDir(), Log: zaptest.NewLogger(t),
				Env: append([]string{"METALLOC_LOG_LEVEL=warn"}, p.env...),
			})
			require.NoError(t, err)
			t.Cleanup(func() { stack.Stop(context.Background()) })
			url := stack.PlacementURL
			report := filepath.Join(t.TempDir(), "report.json")
			cmd := exec.Command("/usr/bin/python3", "run_gabbi.py", "gabbits-8.0.0")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(),
				"PLACEMENT_URL="+url,
				"RESET_CMD="+shellQuote(filepath.Join(pgBin, "psql"))+" -q -X "+shellQuote(dbURL)+" -c "+shellQuote(placementReset),
				"GABBI_PROFILES="+p.profile,
				"REPORT="+report,
			)
			out, err := cmd.CombinedOutput()
			t.Logf("run_gabbi.py (%s):\n%s", p.profile, out)
			var rep gabbiReport
			b, rerr := os.ReadFile(report)
			require.NoError(t, rerr, "run_gabbi.py: %v", err)
			require.NoError(t, json.Unmarshal(b, &rep))
			passed, failed := 0, 0
			for _, f := range rep.Files {
				if f.Status == "skip" {
					continue
				}
				passed += f.Passed
				failed += f.Failed
				for _, tc := range f.Tests {
					if tc.Status == "fail" && tc.Detail != nil {
						t.Errorf("%s: %s:\n%s", f.File, tc.Name, lastLines(*tc.Detail, 12))
					}
				}
			}
			t.Logf("profile %s: %d passed, %d failed", p.profile, passed, failed)
			require.Zero(t, failed)
			require.GreaterOrEqual(t, passed, p.want, "fewer tests ran than the suite has")
		})
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
