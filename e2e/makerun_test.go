package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/internal/freeport"
)

// makeRun is `make run` as a user starts it: in the repository, with
// make's variables, its build step taken as done (the binaries are the
// test's).
type makeRun struct {
	cmd  *exec.Cmd
	out  string        // the file stdout and stderr go to
	done chan struct{} // closed when make has exited
}

// startMakeRun runs `make -o build run BIN=DIR NODES=examples/dc1-nodes.yaml
// vars...` with env (the test's environment without DATABASE_URL, then
// env) in its own process group, and waits until dev up says it is up.
// DIR holds hard links to binDir's binaries: dev up writes its dev.env
// next to its own binary, one per test. Cleanup stops it with SIGINT to
// the group, as Ctrl-C does.
func startMakeRun(t *testing.T, env []string, vars ...string) *makeRun {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	for _, c := range []string{"api", "conductor", "placement", "manage"} {
		require.NoError(t, os.Link(filepath.Join(binDir, "metalloc-"+c), filepath.Join(bin, "metalloc-"+c)))
	}
	args := append([]string{"-o", "build", "run", "BIN=" + bin, "NODES=examples/dc1-nodes.yaml"}, vars...)
	cmd := exec.Command("make", args...)
	cmd.Dir = repoRoot()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, env...), "METALLOC_LOG_LEVEL=warn")
	r := &makeRun{cmd: cmd, out: filepath.Join(dir, "make-run.log"), done: make(chan struct{})}
	f, err := os.Create(r.out)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start())
	var waitErr error
	go func() { waitErr = cmd.Wait(); f.Close(); close(r.done) }()
	t.Cleanup(func() { r.stop() })
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(r.output(), "Ctrl-C stops everything") {
		select {
		case <-r.done:
			t.Fatalf("make run exited (%v) before it was up:\n%s", waitErr, r.output())
		case <-time.After(100 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "make run was not up within 3 minutes:\n%s", r.output())
	}
	return r
}

func (r *makeRun) output() string { b, _ := os.ReadFile(r.out); return string(b) }

// stop sends SIGINT to make's process group, as Ctrl-C does, and waits
// for make to exit (SIGKILL after a minute); it reports whether make
// exited within that minute. Calling it again returns at once.
func (r *makeRun) stop() bool {
	select {
	case <-r.done:
		return true
	default:
	}
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-r.done:
		return true
	case <-time.After(time.Minute):
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		return false
	}
}

// processes returns the pids of make's process tree (from /proc's
// parent pids).
func (r *makeRun) processes() []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	all := []int{r.cmd.Process.Pid}
	for i := 0; i < len(all); i++ {
		all = append(all, children[all[i]]...)
	}
	return all
}

// freePortRange returns the first of n consecutive ports free on
// 127.0.0.1 now.
func freePortRange(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base, err := freeport.Pick()
		require.NoError(t, err)
		free := true
		for p := base + 1; p < base+n && free; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if free = err == nil; free {
				l.Close()
			}
		}
		if free {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports found", n)
	return 0
}

// TestMakeRunPorts: `make run` with every port moved (API_PORT,
// PLACEMENT_PORT, PG_PORT, METRICS_PORT for 2 conductors) into a range
// listens on exactly those 5 ports, its private PostgreSQL included
// (besides its unix socket), nothing outside them, and says what listens
// where. Before these variables only the API's and Placement's ports
// could be moved, and PostgreSQL and the conductors took random ones.
func TestMakeRunPorts(t *testing.T) {
	t.Parallel()
	base := freePortRange(t, 5)
	// The private PostgreSQL's directory in a TMPDIR of the test's, where
	// its postmaster.pid tells its pid; the server user must traverse it.
	tmp, err := os.MkdirTemp("", "metalloc-makerun-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	require.NoError(t, os.Chmod(tmp, 0o755))
	port := func(i int) string { return strconv.Itoa(base + i) }
	r := startMakeRun(t, []string{"TMPDIR=" + tmp},
		"API_PORT="+port(0), "PLACEMENT_PORT="+port(1), "PG_PORT="+port(2), "METRICS_PORT="+port(3))

	pids := r.processes()
	pidFiles, _ := filepath.Glob(filepath.Join(tmp, "metalloc-pg-*", "postmaster.pid"))
	require.Len(t, pidFiles, 1, "the private PostgreSQL's postmaster.pid")
	b, err := os.ReadFile(pidFiles[0])
	require.NoError(t, err)
	postmaster, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	require.NoError(t, err)
	pids = append(pids, postmaster)

	var listening []int
	for _, pid := range pids {
		listening = append(listening, devstack.ListeningPorts(pid)...)
	}
	slices.Sort(listening)
	require.Equal(t, []int{base, base + 1, base + 2, base + 3, base + 4}, slices.Compact(listening),
		"make run's processes listen on these ports; asked for %d-%d:\n%s", base, base+4, r.output())

	out := r.output()
	for i, what := range []string{"metalloc-api", "metalloc-placement", "PostgreSQL", "conductor-1 metrics", "conductor-2 metrics"} {
		require.Regexp(t, `(?m)^  127\.0\.0\.1:`+port(i)+` +`+what, out)
	}
}

// TestMakeRunNoConductors: `make run CONDUCTORS=0` (dev up --conductors 0)
// starts no conductor, says so and still enrolls the sample fleet. Before,
// 0 meant the default and 2 conductors started while dev up printed "0
// conductors".
func TestMakeRunNoConductors(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	r := startMakeRun(t, []string{"DATABASE_URL=" + url},
		"CONDUCTORS=0", "API_PORT="+strconv.Itoa(freePortRange(t, 1)), "PLACEMENT_PORT="+strconv.Itoa(freePortRange(t, 1)))
	require.Contains(t, r.output(), "starting metalloc-api, 0 conductors and metalloc-placement")
	require.NotContains(t, r.output(), "conductor-1")
	for _, pid := range r.processes() {
		comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
		require.NotContains(t, string(comm), "metalloc-cond", "make run CONDUCTORS=0 started a conductor")
	}
	p, err := db.Open(t.Context(), url, db.PoolOptions{MaxConns: 1})
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, 0, dbtest.Count(t, p, `SELECT count(*) FROM conductors`))
	require.Equal(t, 240, dbtest.Count(t, p, `SELECT count(*) FROM nodes WHERE provision_state = 'available'`))
}
