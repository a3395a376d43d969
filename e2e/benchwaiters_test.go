package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// benchWaiters starts `metalloc-manage bench waiters` on database url with
// args, its output in a buffer, and returns the command (started).
func benchWaiters(t *testing.T, url string, args ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "metalloc-manage"), append([]string{"bench", "waiters"}, args...)...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "METALLOC_LOG_LEVEL=warn")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, out
}

// lockedBuffer is an output buffer a process writes while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitExit waits (generously) for cmd to exit and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd, out *lockedBuffer) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(3 * time.Minute):
		t.Fatalf("metalloc-manage bench waiters still running after 3 minutes; output:\n%s", out)
		return -1
	}
}

// TestBenchWaitersLiveConductor: against a database where a conductor is
// alive, `bench waiters` stops at once saying so. It waited two minutes
// for waiters that the conductor answered at once (failing the bench's
// allocations), then failed with "only 0 of N wait requests open". The
// live conductor is named conductor-1, as the ones devstack starts: the
// bench starts none (one of that name would be refused, and the bench
// stopped with "conductor-1 exited" instead).
func TestBenchWaitersLiveConductor(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	startStackOpts(t, 1, devstack.Options{DatabaseURL: url})
	cmd, out := benchWaiters(t, url, "--n", "20", "--wait", "10s")
	require.Equal(t, 1, waitExit(t, cmd, out), out.String())
	require.Contains(t, out.String(), "conductor conductor-1 is alive on this database and would process the bench's allocations")
	require.NotContains(t, out.String(), "wait requests open")
}

// TestBenchWaitersStopsItsProcesses: the metalloc-api that `bench waiters`
// starts does not outlive it, whether it gets SIGTERM (it
// stops them) or SIGKILL (their parent-death signal does). The bench is
// held at its first POST by a lock the test takes on allocations, so the
// signal comes while its processes run. Both used to leave metalloc-api
// running.
func TestBenchWaitersStopsItsProcesses(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := dbtest.NewURL(t)
			pool, err := db.Open(ctx, url, db.PoolOptions{MaxConns: 2})
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)                                        //nolint:errcheck // released below
			_, err = tx.Exec(ctx, `LOCK TABLE allocations IN SHARE MODE`) // blocks inserts, not reads
			require.NoError(t, err)

			cmd, out := benchWaiters(t, url, "--n", "20", "--wait", "10s")
			var api int
			dbtest.WaitFor(t, 2*time.Minute, "the bench's metalloc-api and its first POST waiting on the lock", func() bool {
				if api == 0 {
					api = childNamed(cmd.Process.Pid, "metalloc-api")
				}
				var waiting bool
				// The POST's insert (CreateAllocation or CreateAllocations),
				// not a new connection's warm-up (metalloc_warm_up), which
				// gives up after 100 ms; in this test's database: the other
				// subtest's database, cloned from the same template, has
				// its allocations under the same oid.
				_ = pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
					JOIN pg_stat_activity a ON a.pid = l.pid
					WHERE c.relname = 'allocations' AND NOT l.granted AND a.query LIKE '%name: CreateAllocation%'
					  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting)
				return api != 0 && waiting
			})
			require.NoError(t, cmd.Process.Signal(sig))
			require.NoError(t, tx.Rollback(ctx))
			code := waitExit(t, cmd, out)
			if sig == syscall.SIGTERM {
				require.Equal(t, 1, code, out.String())
				require.Contains(t, out.String(), "terminated signal received")
			}
			dbtest.WaitFor(t, 2*time.Minute, "metalloc-api (pid "+strconv.Itoa(api)+") to exit", func() bool { return !running(api) })
		})
	}
}

// childNamed is the pid of a child of pid whose command is name, or 0.
func childNamed(pid int, name string) int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, f := range tasks {
		raw, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(raw)) {
			comm, _ := os.ReadFile("/proc/" + c + "/comm")
			if strings.TrimSpace(string(comm)) == name {
				n, _ := strconv.Atoi(c)
				return n
			}
		}
	}
	return 0
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}
