package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/examples"
)

// TestDevUpMissingNodeFile: make run with a node file that is not there
// (a typo in NODES=) fails at once, before PostgreSQL starts, naming the
// file and how to choose another.
func TestDevUpMissingNodeFile(t *testing.T) {
	t.Parallel()
	_, stderr, code := run("dev", "up", "--nodes", filepath.Join(t.TempDir(), "missing.yaml"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "missing.yaml: no such file or directory")
	require.Contains(t, stderr, "make run NODES=FILE chooses another node file; NODES=sample imports the sample fleet built in")
	require.NotContains(t, stderr, "starting PostgreSQL")
}

// TestDevUpPortFlags: dev up refuses, before PostgreSQL starts, a port
// flag it cannot honour: out of range, two listeners on one port (the
// conductors' metrics ports run from --metrics-port up), a flag given with
// its older spelling, --conductors below 0, and a port another process
// holds (naming it).
func TestDevUpPortFlags(t *testing.T) {
	t.Setenv("DATABASE_URL", "") // as unset: the private PostgreSQL's port counts
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	busy := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		args    []string
		message string
	}{
		{[]string{"--api-port", "70000"}, "--api-port 70000: a port is 1-65535"},
		{[]string{"--metrics-port", "-1"}, "--metrics-port -1: a port is 1-65535, or 0 for a free one"},
		{[]string{"--placement-port", "eighty"}, `--placement-port "eighty": a port number, or off`},
		{[]string{"--api-port", "7000", "--placement-port", "7003", "--metrics-port", "7002", "--conductors", "2"},
			"metalloc-placement and conductor-2's metrics would both listen on port 7003"},
		{[]string{"--api-port", "7000", "--pg-port", "7000"}, "metalloc-api and PostgreSQL would both listen on port 7000"},
		{[]string{"--listen", "127.0.0.1:7000", "--api-port", "7001"}, "--listen and --api-port set the same listener"},
		{[]string{"--conductors", "-1"}, "--conductors -1: give 0 or more"},
		{[]string{"--api-port", busy}, "metalloc-api cannot listen on 127.0.0.1:" + busy},
		{[]string{"--placement-port", "off", "--backend", "placement"}, "drop --placement-port off"},
	} {
		_, stderr, code := run(append([]string{"dev", "up"}, tc.args...)...)
		require.Equal(t, 1, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.message, "%v", tc.args)
		require.NotContains(t, stderr, "starting PostgreSQL", "%v", tc.args)
	}
	t.Setenv("DATABASE_URL", "postgres://unused")
	_, stderr, code := run("dev", "up", "--pg-port", "7005")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--pg-port 7005 is the private PostgreSQL's port, and with DATABASE_URL set none starts")
}

// TestSampleNodes: dev up --nodes sample imports the fleet built into the
// binary, which is examples/dc1-nodes.yaml (make run's default, what the
// documentation uses): 240 available nodes in 30 racks, r1-rack01-n2
// baremetal-gold with CUSTOM_NVME, 30 GPU nodes (as the README's
// topology example counts them), 23 of them with CUSTOM_GPU_A100.
func TestSampleNodes(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile(filepath.Join("..", "..", "examples", "dc1-nodes.yaml"))
	require.NoError(t, err)
	require.Equal(t, file, examples.DC1Nodes)
	url := dbtest.NewURL(t)
	require.NoError(t, importFrom(t.Context(), url, bytes.NewReader(examples.DC1Nodes), "sample", importOptions{available: true}, zap.NewNop()))
	p, err := db.Open(t.Context(), url, db.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, 240, dbtest.Count(t, p, `SELECT count(*) FROM nodes WHERE provision_state = 'available'`))
	require.Equal(t, 30, dbtest.Count(t, p, `SELECT count(DISTINCT (extra->>'row') || '/' || (extra->>'rack')) FROM nodes`))
	require.Equal(t, 1, dbtest.Count(t, p, `SELECT count(*) FROM nodes n JOIN node_traits nt ON nt.node_id = n.id
		WHERE n.name = 'r1-rack01-n2' AND n.resource_class = 'baremetal-gold' AND nt.trait = 'CUSTOM_NVME'`))
	require.Equal(t, 30, dbtest.Count(t, p, `SELECT count(*) FROM nodes WHERE resource_class = 'baremetal-gpu'`))
	require.Equal(t, 23, dbtest.Count(t, p, `SELECT count(*) FROM nodes n JOIN node_traits nt ON nt.node_id = n.id
		WHERE n.resource_class = 'baremetal-gpu' AND nt.trait = 'CUSTOM_GPU_A100'`))
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

// TestDevUpIronicFlags: dev up refuses, before anything starts, an
// --ironic it cannot honour: --ironic-port without --ironic, out of range,
// on another listener's port or a busy one (naming it), --ironic with
// --ha, and a node file Ironic's fake-hardware cannot take (ports,
// another driver), naming the file.
func TestDevUpIronicFlags(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	busy := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	nodes := filepath.Join(t.TempDir(), "ipmi.yaml")
	require.NoError(t, os.WriteFile(nodes, []byte("nodes:\n- name: a\n  driver: ipmi\n"), 0o644))
	for _, tc := range []struct {
		args    []string
		message string
	}{
		{[]string{"--ironic-port", "7010"}, "--ironic-port needs --ironic (make run IRONIC=1)"},
		{[]string{"--ironic", "--ironic-port", "70000"}, "--ironic-port 70000: a port is 1-65535, or 0 for a free one"},
		{[]string{"--ironic", "--api-port", "7010", "--ironic-port", "7010"}, "metalloc-api and Ironic's API would both listen on port 7010"},
		{[]string{"--ironic", "--ironic-port", busy}, "Ironic's API cannot listen on 127.0.0.1:" + busy},
		{[]string{"--ironic", "--ha"}, "--ironic and --ha together are not supported"},
		{[]string{"--ironic", "--nodes", nodes}, nodes + `: node file: node 0 (a): driver "ipmi": this Ironic runs fake-hardware only`},
	} {
		_, stderr, code := run(append([]string{"dev", "up"}, tc.args...)...)
		require.Equal(t, 1, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.message, "%v", tc.args)
		require.NotContains(t, stderr, "starting PostgreSQL", "%v", tc.args)
	}
}
