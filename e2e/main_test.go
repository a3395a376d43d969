// Package e2e holds end-to-end tests: real metalloc-api and metalloc-conductor
// processes on a real PostgreSQL, driven by gophercloud, the Go OpenStack
// client. The binaries are built once per test run.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/db/embedded"
)

// binDir holds the freshly built metalloc binaries.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "metalloc-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	for _, c := range []string{"api", "conductor", "placement", "manage"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "metalloc-"+c), "./cmd/"+c)
		cmd.Dir = repoRoot()
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building metalloc-"+c+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// repoRoot is the module root (the directory above this file's).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// privateCluster starts a PostgreSQL cluster of the test's own
// (dbtest.PrivateCluster: one it may stop, kill or fill) with settings, with
// database "metalloc" migrated and n available nodes of class rc. It returns
// the cluster and the parent directory (for more data directories, e.g. a
// standby's).
func privateCluster(t *testing.T, settings map[string]string, n int, rc string) (*embedded.Cluster, string) {
	t.Helper()
	cluster, dir := dbtest.PrivateCluster(t, settings)
	seed, err := db.Open(context.Background(), cluster.URL("metalloc"), db.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	defer seed.Close()
	if n > 0 {
		dbtest.Nodes(t, seed, n, rc)
	}
	return cluster, dir
}
