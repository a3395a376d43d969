package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/allocations"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/placement/client"
)

// metricName finds the metalloc metric names in a PromQL expression.
var metricName = regexp.MustCompile(`\bmetalloc_[a-z0-9_]+\b`)

// dashboardExprs are the PromQL expressions of the Grafana dashboard's
// panels, with Grafana's $__rate_interval made a plain duration.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "configs", "grafana", "metalloc.json"))
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash), "configs/grafana/metalloc.json")
	var out []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out = append(out, strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m"))
		}
	}
	require.NotEmpty(t, out)
	return out
}

// alertExprs are the expressions of configs/prometheus/alerts.yml.
func alertExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "configs", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	var doc struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	var out []string
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	require.NotEmpty(t, out)
	return out
}

// promtool runs Debian's promtool (package prometheus, installed by
// scripts/test-deps.sh) with args.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is needed: run scripts/test-deps.sh (Debian package prometheus)")
	out, err := exec.Command(path, args...).CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
}

// TestDashboardMetrics checks the Grafana dashboard and the alert rules
// against the running services: the rules parse (promtool check rules), so
// does every panel's query (as recording rules), and every metalloc metric
// either names is on /metrics of metalloc-api, a metalloc-conductor or
// metalloc-placement after some traffic.
func TestDashboardMetrics(t *testing.T) {
	t.Parallel()
	dash, alerts := dashboardExprs(t), alertExprs(t)

	promtool(t, "check", "rules", filepath.Join(repoRoot(), "configs", "prometheus", "alerts.yml"))
	var rec strings.Builder
	rec.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range dash {
		q, err := json.Marshal(e) // a JSON string is a YAML string
		require.NoError(t, err)
		fmt.Fprintf(&rec, "      - record: dashboard:panel_%d\n        expr: %s\n", i, q)
	}
	recPath := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	require.NoError(t, os.WriteFile(recPath, []byte(rec.String()), 0o644))
	promtool(t, "check", "rules", recPath)

	// A stack with placement, one allocation that succeeds and one that
	// fails, so every labelled series has appeared.
	ctx := context.Background()
	stack, bm := startStackOpts(t, 1, devstack.Options{Placement: true})
	sample := loadSample(t)[:4]
	enroll(t, ctx, bm, sample)
	good, err := allocations.Create(ctx, bm, allocations.CreateOpts{ResourceClass: sample[0].ResourceClass}).Extract()
	require.NoError(t, err)
	bad, err := allocations.Create(ctx, bm, allocations.CreateOpts{ResourceClass: "baremetal-nope"}).Extract()
	require.NoError(t, err)
	for _, id := range []string{good.UUID, bad.UUID} {
		dbtest.WaitFor(t, 30*time.Second, "allocation "+id+" finished", func() bool {
			a, err := allocations.Get(ctx, bm, id).Extract()
			return err == nil && a.State != "allocating"
		})
	}

	// An inventory set below its usage (Placement 8.0 accepts it), for
	// metalloc_placement_inventory_over_capacity_total's first series.
	pc := metallocPlacementClient(stack.PlacementURL)
	rp := uuid.New()
	_, err = pc.CreateProvider(ctx, rp, "over-capacity")
	require.NoError(t, err)
	gen, err := pc.PutInventories(ctx, rp, client.Inventories{Inventories: map[string]client.Inventory{
		"VCPU": {Total: 4, MinUnit: 1, MaxUnit: 4, StepSize: 1, AllocationRatio: 1}}})
	require.NoError(t, err)
	require.NoError(t, pc.PutAllocations(ctx, uuid.New(), client.Claim{ProjectID: "p", UserID: "u",
		Request: client.AllocationRequest{Allocations: map[uuid.UUID]client.ProviderResources{rp: {Resources: map[string]int64{"VCPU": 4}}}}}))
	_, err = pc.PutInventories(ctx, rp, client.Inventories{Generation: gen + 1, Inventories: map[string]client.Inventory{
		"VCPU": {Total: 2, MinUnit: 1, MaxUnit: 2, StepSize: 1, AllocationRatio: 1}}})
	require.NoError(t, err)

	exported := map[string]bool{}
	urls := []string{stack.APIURL + "/metrics", stack.PlacementURL + "/metrics"}
	for _, c := range stack.Conductors {
		urls = append(urls, c.MetricsURL)
	}
	for _, u := range urls {
		for _, line := range strings.Split(scrape(t, u), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, _, _ := strings.Cut(line, " ")
			name, _, _ = strings.Cut(name, "{")
			exported[name] = true
		}
	}
	var missing []string
	for _, e := range append(dash, alerts...) {
		for _, name := range metricName.FindAllString(e, -1) {
			if !exported[name] && !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
		}
	}
	require.Empty(t, missing, "metrics the dashboard or the alert rules use that no service exports")
	for _, want := range []string{"metalloc_allocations_allocating", "metalloc_conductors_alive", "metalloc_db_up"} {
		require.True(t, exported[want], want)
	}
	api := scrape(t, stack.APIURL+"/metrics")
	require.Equal(t, "1", metricValue(api, "metalloc_conductors_alive"))
	require.Equal(t, "0", metricValue(api, "metalloc_allocations_allocating"))
	require.Equal(t, "1", metricValue(api, "metalloc_db_up"))
}
