package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/allocations"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// manageConductor runs `metalloc-manage conductor args...` on pool's
// database and returns its stdout, stderr and exit status.
func manageConductor(t *testing.T, pool *pgxpool.Pool, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "metalloc-manage"), append([]string{"conductor"}, args...)...)
	cmd.Env = append(os.Environ(), "METALLOC_DATABASE_URL="+pool.Config().ConnString(), "METALLOC_LOG_LEVEL=warn")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

// conductorStates is `metalloc-manage conductor list -f json` by hostname.
func conductorStates(t *testing.T, pool *pgxpool.Pool) map[string]map[string]any {
	t.Helper()
	out, stderr, code := manageConductor(t, pool, "list", "-f", "json")
	require.Zero(t, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	states := map[string]map[string]any{}
	for _, r := range rows {
		states[r["Hostname"].(string)] = r
	}
	return states
}

// TestConductorDrainCommand: `metalloc-manage conductor drain HOST` on two
// conductor processes. The one owning most rows waiting for nodes the
// test holds locked is drained: the command prints its progress, then how
// many rows it handed over (its rows, released after its grace), and
// exits 0; `conductor list` shows it drained, holding nothing, alive. Its
// rows finish through the other, and it claims nothing while drained. An
// unknown hostname and a stopped conductor are refused with exit 1; a
// restart under its hostname ends the drain.
func TestConductorDrainCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("process HA test")
	}
	stack, client, pool := haStackEnv(t, 2, livenessEnv)
	ctx := context.Background()
	const blocked = 8
	dbtest.Nodes(t, pool, blocked, "blocked")
	dbtest.Nodes(t, pool, 40, "gold")
	release := lockNodes(t, pool, "blocked")
	for range blocked {
		_, err := allocations.Create(ctx, client, allocations.CreateOpts{ResourceClass: "blocked"}).Extract()
		require.NoError(t, err)
	}
	dbtest.WaitFor(t, 20*time.Second, "the blocked allocations claimed", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE conductor_affinity IS NOT NULL`) == blocked
	})
	var victim string
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT c.hostname FROM conductors c JOIN allocations a ON a.conductor_affinity = c.id
		 GROUP BY c.hostname ORDER BY count(*) DESC, c.hostname LIMIT 1`).Scan(&victim))
	victimID := conductorID(t, pool, victim)
	owned := queryInt(t, pool, `SELECT count(*) FROM allocations WHERE conductor_affinity = $1`, victimID)
	require.Equal(t, owned, int(conductorStates(t, pool)[victim]["Held"].(float64)))

	out, stderr, code := manageConductor(t, pool, "drain", victim, "--timeout", "30s")
	t.Logf("conductor drain %s (owning %d rows):\n%s", victim, owned, out)
	require.Zero(t, code, stderr)
	require.Contains(t, out, "conductor "+victim+" asked to drain; waiting until it holds no rows (timeout 30s)")
	require.Regexp(t, `conductor `+victim+` drained in [0-9.]+m?s: `+strconv.Itoa(owned)+` rows handed over`, out,
		"its waiting rows were released, not finished")
	require.Zero(t, queryInt(t, pool, `SELECT count(*) FROM allocations WHERE conductor_affinity = $1`, victimID))
	st := conductorStates(t, pool)[victim]
	require.Equal(t, "drained", st["State"])
	require.EqualValues(t, 0, st["Held"])

	// Its rows finish through the peer; new work goes to the peer only;
	// the drained one stays alive.
	release()
	for range 10 {
		_, err := allocations.Create(ctx, client, allocations.CreateOpts{ResourceClass: "gold"}).Extract()
		require.NoError(t, err)
	}
	dbtest.WaitFor(t, 30*time.Second, "every allocation active", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM allocations WHERE state = 'active'`) == blocked+10
	})
	checkInvariants(t, pool)
	require.Zero(t, queryInt(t, pool, `SELECT count(*) FROM allocations WHERE conductor_affinity = $1`, victimID),
		"the drained conductor claimed nothing")
	require.Equal(t, "drained", conductorStates(t, pool)[victim]["State"])

	// Refusals: exit 1 with the reason.
	_, stderr, code = manageConductor(t, pool, "drain", "no-such-conductor")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `conductor "no-such-conductor": no conductor has this hostname`)
	var proc *devstack.Process
	for _, p := range stack.Conductors {
		if p.Name == victim {
			proc = p
		}
	}
	require.NoError(t, proc.Signal(syscall.SIGTERM))
	require.NoError(t, proc.Wait(20*time.Second))
	_, stderr, code = manageConductor(t, pool, "drain", victim)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "offline (stopped cleanly)")
	require.Equal(t, "stopped", conductorStates(t, pool)[victim]["State"])

	// A restart ends the drain: it claims again.
	_, err := stack.StartConductor(victim)
	require.NoError(t, err)
	dbtest.WaitFor(t, 20*time.Second, "the restarted conductor alive", func() bool {
		return conductorStates(t, pool)[victim]["State"] == "alive"
	})
}
