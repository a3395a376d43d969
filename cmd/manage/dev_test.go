package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// TestDevUpMissingNodeFile: make run with a node file that is not there
// (../shared missing, a typo in NODES=) fails at once, before PostgreSQL
// starts, naming the file and how to choose another.
func TestDevUpMissingNodeFile(t *testing.T) {
	t.Parallel()
	_, stderr, code := run("dev", "up", "--nodes", filepath.Join(t.TempDir(), "missing.yaml"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "missing.yaml: no such file or directory")
	require.Contains(t, stderr, "make run NODES=FILE chooses another node file; NODES=sample generates 240 sample nodes")
	require.NotContains(t, stderr, "starting PostgreSQL")
}

// TestSampleNodes: the generated fleet of make run NODES=sample imports as
// 240 available nodes in racks of 8, and the README's examples find what
// they ask for (r1-rack01-n2 is baremetal-gold with CUSTOM_NVME; GPU nodes
// with CUSTOM_GPU_A100).
func TestSampleNodes(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	require.NoError(t, importFrom(t.Context(), url, bytes.NewReader(devstack.SampleNodes(240)), "sample", importOptions{available: true}, zap.NewNop()))
	p, err := db.Open(t.Context(), url, db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, 240, dbtest.Count(t, p, `SELECT count(*) FROM nodes WHERE provision_state = 'available'`))
	require.Equal(t, 30, dbtest.Count(t, p, `SELECT count(DISTINCT (extra->>'row') || '/' || (extra->>'rack')) FROM nodes`))
	require.Equal(t, 1, dbtest.Count(t, p, `SELECT count(*) FROM nodes n JOIN node_traits nt ON nt.node_id = n.id
		WHERE n.name = 'r1-rack01-n2' AND n.resource_class = 'baremetal-gold' AND nt.trait = 'CUSTOM_NVME'`))
	require.Positive(t, dbtest.Count(t, p, `SELECT count(*) FROM nodes n JOIN node_traits nt ON nt.node_id = n.id
		WHERE n.resource_class = 'baremetal-gpu' AND nt.trait = 'CUSTOM_GPU_A100'`))
	// The same count gives the same file (uuids from the names).
	require.Equal(t, devstack.SampleNodes(8), devstack.SampleNodes(8))
}

// TestDevEnv: dev env prints the file dev up wrote while its process
// lives, and says what to do when none runs or it is gone.
func TestDevEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "dev.env")
	_, stderr, code := run("dev", "env", "--env-file", file)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no dev stack is running")
	require.Contains(t, stderr, "make run")

	env := fmt.Sprintf("%s%d; removed when it stops.\nexport DATABASE_URL='postgres://x'\n", devEnvPID, os.Getpid())
	require.NoError(t, os.WriteFile(file, []byte(env), 0o600))
	out, _, code := run("dev", "env", "--env-file", file)
	require.Equal(t, 0, code)
	require.Equal(t, env, out)

	// A pid that is not running: the stack is gone (pid_max is below 2^22).
	require.NoError(t, os.WriteFile(file, []byte(devEnvPID+"4194305; removed when it stops.\n"), 0o600))
	_, stderr, code = run("dev", "env", "--env-file", file)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "is gone")
}

// TestDevUpHAFlags: --ha-members without --ha, and --ha with a
// DATABASE_URL (whose database --ha would not use), fail at once, before
// anything starts.
func TestDevUpHAFlags(t *testing.T) {
	_, stderr, code := run("dev", "up", "--ha-members", "2")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--ha-members needs --ha")
	t.Setenv("DATABASE_URL", "postgres://metalloc@db.example/metalloc")
	_, stderr, code = run("dev", "up", "--ha")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--ha starts its own PostgreSQL members: unset DATABASE_URL")
	require.NotContains(t, stderr, "starting")
}
