package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/internal/keystonetest"
)

// blazarFleet makes a database with three reservable nodes of class bz
// (bz-1 and bz-2 with 8192 MB, bz-3 with 2048 MB; owned by owner when
// not empty) and returns its URL and a pool on it.
func blazarFleet(t *testing.T, owner string) (string, *pgxpool.Pool) {
	t.Helper()
	url := dbtest.NewURL(t)
	pool, err := db.Open(context.Background(), url, db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	for i, mem := range []int{8192, 8192, 2048} {
		spec := dbtest.NodeSpec{Name: fmt.Sprintf("bz-%d", i+1), ResourceClass: "bz",
			Properties: map[string]any{"memory_mb": mem, "cpus": 16, "local_gb": 200}}
		if owner != "" {
			spec.Owner = &owner
		}
		dbtest.Node(t, pool, spec)
	}
	_, err = pool.Exec(context.Background(), `UPDATE nodes SET reservable = true`)
	require.NoError(t, err)
	return url, pool
}

// oscRun runs the openstack CLI with args and the environment env added.
func oscRun(env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "openstack", args...)
	cmd.Env = append(append(os.Environ(), "PYTHONWARNINGS=ignore"), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// jsonObject decodes the JSON object in out (blazarclient prints "Created
// a new lease:" before it).
func jsonObject(t *testing.T, out string) map[string]any {
	t.Helper()
	i := strings.Index(out, "{")
	require.GreaterOrEqual(t, i, 0, out)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out[i:]), &doc), out)
	return doc
}

// blazarScenario is issue 43's python-blazarclient scenario, run by
// `openstack reservation ...` through run: host list and show, lease
// create (min/max, resource_properties), show, extend (--prolong-for and
// --end-date), a refusal, delete; the lease is checked in metalloc's
// table (one model) with project want.
func blazarScenario(t *testing.T, pool *pgxpool.Pool, want string, run func(args ...string) (string, error)) {
	t.Helper()
	must := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		require.NoError(t, err, "openstack %s:\n%s", strings.Join(args, " "), out)
		return out
	}
	require.Equal(t, []string{"bz-1", "bz-2", "bz-3"},
		column(t, must("reservation", "host", "list", "-f", "json"), "hypervisor_hostname"))
	host := jsonObject(t, must("reservation", "host", "show", "bz-3", "-f", "json"))
	require.EqualValues(t, 2048, host["memory_mb"])

	out := must("reservation", "lease", "create", "--reservation",
		`resource_type=physical:host,min=1,max=3,resource_properties=["and", ["=", "$resource_class", "bz"], [">=", "$memory_mb", "4096"]]`,
		"--start-date", "2030-01-06 09:00", "--end-date", "2030-01-07 09:00", "gpu-week", "-f", "json")
	lease := jsonObject(t, out)
	require.Equal(t, "PENDING", lease["status"], out)
	require.Equal(t, "2030-01-06T09:00:00.000000", lease["start_date"], out)
	require.Contains(t, lease["reservations"], `"min": 1`, "the range asked, as Blazar shows it: %s", out)
	require.Contains(t, lease["reservations"], `"max": 3`, "the range asked, as Blazar shows it: %s", out)
	id := lease["id"].(string)

	show := jsonObject(t, must("reservation", "lease", "show", "gpu-week", "-f", "json"))
	require.Equal(t, id, show["id"])
	require.Contains(t, fmt.Sprint(must("reservation", "lease", "list", "-f", "json")), id)

	must("reservation", "lease", "set", "--prolong-for", "1d", "gpu-week")
	show = jsonObject(t, must("reservation", "lease", "show", id, "-f", "json"))
	require.Equal(t, "2030-01-08T09:00:00.000000", show["end_date"])
	must("reservation", "lease", "set", "--end-date", "2030-01-09 09:00", id)
	var project string
	var end time.Time
	var booked int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT l.project_id, l.end_time,
		(SELECT count(*) FROM lease_nodes n WHERE n.lease_id = l.id AND NOT n.released)
		FROM leases l WHERE l.uuid = $1`, id).Scan(&project, &end, &booked))
	require.Equal(t, want, project)
	require.Equal(t, time.Date(2030, 1, 9, 9, 0, 0, 0, time.UTC), end.UTC())
	require.Equal(t, 2, booked, "max when it fits, else what fits down to min")

	// The big nodes are taken over that window: refused, with the reason.
	out, err := run("reservation", "lease", "create", "--reservation",
		`resource_type=physical:host,min=1,max=1,resource_properties=[">=", "$memory_mb", "4096"]`,
		"--start-date", "2030-01-08 00:00", "--end-date", "2030-01-08 12:00", "overlap")
	require.Error(t, err, out)
	require.Contains(t, out, "Not enough hosts available", out)

	must("reservation", "lease", "delete", "gpu-week")
	require.NotContains(t, must("reservation", "lease", "list", "-f", "json"), id)
	require.Equal(t, 0, dbtest.Count(t, pool, `SELECT count(*) FROM leases`))
}

// TestBlazarClientNoAuth runs the python-blazarclient scenario (Debian's
// python3-blazarclient, an openstackclient plugin) against metalloc-api
// with --os-auth-type none and --os-endpoint .../reservation/v1.
func TestBlazarClientNoAuth(t *testing.T) {
	t.Parallel()
	url, pool := blazarFleet(t, "")
	stack, _ := startStackOpts(t, 0, devstack.Options{DatabaseURL: url, NoConductors: true})
	endpoint := stack.APIURL + "/reservation/v1"
	blazarScenario(t, pool, "admin", func(args ...string) (string, error) {
		return oscRun([]string{"OS_CLOUD=", "OS_CLIENT_CONFIG_FILE=/dev/null"},
			append([]string{"--os-auth-type", "none", "--os-endpoint", endpoint}, args...)...)
	})
}

// TestBlazarClientKeystone runs the same scenario as a project member
// (alice of tenant-a, which owns the nodes) against metalloc-api with
// auth_strategy keystone, the CLI finding Blazar's endpoint in Keystone's
// catalog (service type reservation); the lease is tenant-a's.
func TestBlazarClientKeystone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ks, err := keystonetest.StartKeystone(ctx, t.TempDir(), zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(ks.Stop)
	projects := map[string]string{}
	for _, p := range []string{"service", "tenant-a"} {
		projects[p], err = ks.CreateProject(ctx, p)
		require.NoError(t, err)
	}
	svc, err := ks.CreateUser(ctx, "metalloc", "metalloc-service-pw")
	require.NoError(t, err)
	require.NoError(t, ks.GrantProjectRole(ctx, svc, projects["service"], "service"))
	require.NoError(t, ks.GrantProjectRole(ctx, svc, projects["service"], "admin"))
	alice, err := ks.CreateUser(ctx, "alice", "alice-pw")
	require.NoError(t, err)
	require.NoError(t, ks.GrantProjectRole(ctx, alice, projects["tenant-a"], "member"))

	url, pool := blazarFleet(t, projects["tenant-a"])
	stack, _ := startStackOpts(t, 0, devstack.Options{DatabaseURL: url, NoConductors: true, Env: []string{
		"METALLOC_API_AUTH_STRATEGY=keystone",
		"METALLOC_KEYSTONE_AUTH_URL=" + ks.URL,
		"METALLOC_KEYSTONE_USERNAME=metalloc",
		"METALLOC_KEYSTONE_PASSWORD=metalloc-service-pw",
	}})
	require.NoError(t, ks.AddEndpoint(ctx, "reservation", "blazar", stack.APIURL+"/reservation/v1"))

	clouds := filepath.Join(t.TempDir(), "clouds.yaml")
	require.NoError(t, os.WriteFile(clouds, []byte(fmt.Sprintf(`clouds:
  alice:
    region_name: RegionOne
    identity_api_version: 3
    auth:
      auth_url: %s
      username: alice
      password: alice-pw
      user_domain_name: Default
      project_name: tenant-a
      project_domain_name: Default
`, ks.URL)), 0o600))
	blazarScenario(t, pool, projects["tenant-a"], func(args ...string) (string, error) {
		return cliRun(clouds, "alice", args...)
	})
	// Without a token: 401 in Blazar's error body, with the challenge.
	resp, err := http.Get(stack.APIURL + "/reservation/v1/leases")
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.EqualValues(t, 401, body["error_code"], "%v", body)
	require.NotEmpty(t, resp.Header.Get("WWW-Authenticate"))
}
