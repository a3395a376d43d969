package dbtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/embedded"
)

// PrivateCluster starts a PostgreSQL cluster of the test's own (one it may
// stop, kill or fill, unlike the shared DATABASE_URL) with settings, in a
// fresh directory under os.TempDir(), and creates and migrates database
// "metalloc" on it. It returns the cluster (stopped at t.Cleanup) and the
// parent directory (for more data directories, e.g. a standby's).
func PrivateCluster(t *testing.T, settings map[string]string) (*embedded.Cluster, string) {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp(os.TempDir(), "metalloc-test-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the server user must reach the data dirs
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cluster, err := embedded.Start(ctx, embedded.Options{DataDir: filepath.Join(dir, "pg"), Log: zaptest.NewLogger(t), Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })
	if err := cluster.CreateDatabase(ctx, "metalloc"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, cluster.URL("metalloc"), nil); err != nil {
		t.Fatal(err)
	}
	return cluster, dir
}
