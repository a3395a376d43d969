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
	"go.uber.org/zap/zaptest"

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

// privateCluster starts a PostgreSQL cluster of the test's own (one it may
// stop, kill or fill, unlike the shared DATABASE_URL) with settings, in a
// fresh directory under os.TempDir(), and creates and migrates database
// "metalloc" with n available nodes of class rc. It returns the cluster and
// the parent directory (for more data directories, e.g. a standby's).
func privateCluster(t *testing.T, settings map[string]string, n int, rc string) (*embedded.Cluster, string) {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp(os.TempDir(), "metalloc-e2e-pg-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the server user must reach the data dirs
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cluster, err := embedded.Start(ctx, embedded.Options{DataDir: filepath.Join(dir, "pg"), Log: zaptest.NewLogger(t), Settings: settings})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })
	require.NoError(t, cluster.CreateDatabase(ctx, "metalloc"))
	_, err = db.Migrate(ctx, cluster.URL("metalloc"), nil)
	require.NoError(t, err)
	seed, err := db.Open(ctx, cluster.URL("metalloc"), db.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	defer seed.Close()
	if n > 0 {
		dbtest.Nodes(t, seed, n, rc)
	}
	return cluster, dir
}
