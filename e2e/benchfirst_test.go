package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
)

// TestBenchFirstBurst runs `metalloc-manage bench first-burst` (make bench
// MODE=first-burst, issue 44's scenario) small: every case enrolls its
// fleet through the API on a database of its own, the table has a row per
// case and the later burst, and the scratch databases are gone afterwards.
func TestBenchFirstBurst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t)
	run := func(args ...string) (string, int) {
		cmd := exec.Command(filepath.Join(binDir, "metalloc-manage"), append([]string{"bench", "first-burst"}, args...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "METALLOC_LOG_LEVEL=warn")
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		require.NoError(t, err)
		return string(out), 0
	}

	out, code := run("--cases", "none,nosuch")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `--cases: unknown case "nosuch" (none, vacuum or analyze)`)

	out, code = run("--nodes", "120", "--allocations", "40", "--concurrency", "8", "--conductors", "1", "--later", "2s")
	require.Equal(t, 0, code, out)
	t.Log(out)
	for _, want := range []string{
		"nodes: 120 enrolled through the API (one class, three traits each), 40 allocations per burst from 8 clients, conductors: 1",
		"| nothing else done (what a user gets) |",
		"| 2s later (the same fleet) |",
		"| `VACUUM nodes; VACUUM node_traits` first |",
		"| `ANALYZE` first |",
		"first burst as a share of the one 2s later: ",
	} {
		require.Contains(t, out, want)
	}

	pool, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var left []string
	rows, err := pool.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'metalloc_first_burst_%'`)
	require.NoError(t, err)
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		left = append(left, n)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, left, "scratch databases left behind:\n%s", strings.Join(left, "\n"))
}
