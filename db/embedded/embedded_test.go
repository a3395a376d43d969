package embedded

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestCompareVersions(t *testing.T) {
	require.Positive(t, compareVersions("10", "9.6"))
	require.Negative(t, compareVersions("15", "16"))
	require.Zero(t, compareVersions("15", "15"))
}

// TestStartReuseStop starts a cluster, checks a second Start on the same data
// dir reuses it without owning it, and stops it.
func TestStartReuseStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	if _, ok := findBinaries(); !ok {
		t.Skip("PostgreSQL server binaries not installed")
	}
	ctx := t.Context()
	dir, err := os.MkdirTemp(os.TempDir(), "metalloc-pg-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	c, err := Start(ctx, Options{DataDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	require.NoError(t, c.CreateDatabase(ctx, "it's"))
	require.NoError(t, c.CreateDatabase(ctx, "it's")) // idempotent
	conn, err := pgx.Connect(ctx, c.URL("it's"))
	require.NoError(t, err)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.NoError(t, conn.Close(ctx))

	again, err := Start(ctx, Options{DataDir: dir})
	require.NoError(t, err)
	require.Equal(t, c.Port(), again.Port())
	require.NoError(t, again.Stop(ctx)) // not ours: no-op
	conn, err = pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err, "server must survive Stop of a reused cluster")
	require.NoError(t, conn.Close(ctx))

	require.NoError(t, c.Stop(ctx))
	_, running := c.running(ctx)
	require.False(t, running)
}

// TestStopStartAgain stops a cluster, checks it refuses connections while
// keeping its data, and starts it again on the same port.
func TestStopStartAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	if _, ok := findBinaries(); !ok {
		t.Skip("PostgreSQL server binaries not installed")
	}
	ctx := t.Context()
	dir, err := os.MkdirTemp(os.TempDir(), "metalloc-pg-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	c, err := Start(ctx, Options{DataDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	require.NoError(t, c.CreateDatabase(ctx, "kept"))
	port := c.Port()

	require.NoError(t, c.Stop(ctx))
	require.NoError(t, c.Stop(ctx)) // already stopped: no-op
	_, err = pgx.Connect(ctx, c.URL("kept"))
	require.Error(t, err, "a stopped cluster must refuse connections")

	require.NoError(t, c.StartAgain(ctx))
	require.NoError(t, c.StartAgain(ctx)) // already running: no-op
	require.Equal(t, port, c.Port())
	conn, err := pgx.Connect(ctx, c.URL("kept"))
	require.NoError(t, err, "the database created before Stop must still exist")
	require.NoError(t, conn.Close(ctx))

	require.NoError(t, c.Restart(ctx))
	conn, err = pgx.Connect(ctx, c.URL("kept"))
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	reused, err := Start(ctx, Options{DataDir: dir})
	require.NoError(t, err)
	require.Error(t, reused.Restart(ctx), "Restart of a cluster Start did not start")
	require.NoError(t, c.Stop(ctx))
}

// TestSharedBuffers: a quarter of the memory, between 256 MB and 2 GB; this
// machine's memory is read.
func TestSharedBuffers(t *testing.T) {
	const gb = 1 << 30
	for mem, want := range map[uint64]string{0: "256MB", gb / 2: "256MB", 2 * gb: "512MB", 4 * gb: "1024MB", 6 * gb: "1536MB", 64 * gb: "2048MB"} {
		require.Equal(t, want, SharedBuffers(mem), "%d bytes", mem)
	}
	require.NotZero(t, memTotal())
}
