// Package pgtest holds what only the tests do to an embedded PostgreSQL
// cluster (package db/embedded, which metalloc-manage links for its private
// databases): make a streaming standby of it, promote the standby, crash
// the primary. The failover test (e2e TestFailoverToSynchronousStandby)
// uses them, and package internal/patroni (the Patroni cluster of the
// tests and of dev up --ha) crashes its members with KillPostmaster.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db/embedded"
)

// StartStandby makes a streaming standby of primary in the empty or missing
// directory dataDir (pg_basebackup -R: standby.signal and primary_conninfo
// pointing at primary, with application_name set to the directory's base
// name) and starts it with embedded.Start on a free port, with opt's
// Settings and Log (opt.DataDir and opt.Port are ignored). primary must
// accept replication connections from 127.0.0.1 (initdb's default). A
// synchronous standby is one that primary's synchronous_standby_names names
// ("*": any). Stop the standby with its own Stop.
func StartStandby(ctx context.Context, primary *embedded.Cluster, dataDir string, opt embedded.Options) (*embedded.Cluster, error) {
	dataDir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("standby dir: %w", err)
	}
	log := opt.Log
	if log == nil {
		log = zap.NewNop()
	}
	binDir, err := embedded.EnsureBinaries(ctx, log)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating standby dir: %w", err)
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.Port(), filepath.Base(dataDir))
	// As root the files are ours; embedded.Start hands the directory to
	// the server's user.
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pg_basebackup"),
		"-D", dataDir, "-d", conninfo, "-R", "-X", "stream", "-c", "fast")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("base backup: %w: %s", err, out)
	}
	opt.DataDir, opt.Port = dataDir, 0
	return embedded.Start(ctx, opt)
}

// Promote turns standby c into a primary (pg_promote) and waits, up to a
// minute, until it accepts writes.
func Promote(ctx context.Context, c *embedded.Cluster) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("promoting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var done bool
	if err := conn.QueryRow(ctx, `SELECT pg_promote(true, 60)`).Scan(&done); err != nil {
		return fmt.Errorf("promoting: %w", err)
	}
	if !done {
		return errors.New("promoting: not a primary after 60s")
	}
	return nil
}

// Kill sends SIGKILL to c's server and to every process it started (a
// crashed host, as far as clients can tell: their connections break and
// nothing is shut down cleanly). The cluster is gone for good: its Stop
// then fails, harmlessly.
func Kill(ctx context.Context, c *embedded.Cluster) error {
	pid, err := postmaster(ctx, c)
	if err != nil {
		return err
	}
	return KillPostmaster(pid)
}

// KillPostmaster sends SIGKILL to the PostgreSQL server whose postmaster is
// process pid and to every process it started, as Kill does; for a server
// that no embedded.Cluster runs (one under Patroni, package
// internal/patroni). Its error says which process could not be signalled.
func KillPostmaster(pid int) error {
	// Stop the postmaster first so that it forks no backend while its
	// children are listed and killed.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stopping %d: %w", pid, err)
	}
	// The stop takes effect asynchronously: wait for it, then kill the
	// children until none is left running (a dead child stays a zombie
	// until the postmaster, stopped, would reap it).
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for procState(pid) != "T" && time.Now().Before(deadline) {
		<-tick.C
	}
	for {
		live := 0
		for _, ch := range childrenOf(pid) {
			if procState(ch) != "Z" {
				live++
				_ = syscall.Kill(ch, syscall.SIGKILL)
			}
		}
		if live == 0 || time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing %d: %w", pid, err)
	}
	return nil
}

// postmaster is the process id of c's server: the parent of a backend.
func postmaster(ctx context.Context, c *embedded.Cluster) (int, error) {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return 0, fmt.Errorf("finding the server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return 0, fmt.Errorf("finding the server: %w", err)
	}
	f := statFields(backend)
	if len(f) < 2 {
		return 0, fmt.Errorf("finding the server: no process %d", backend)
	}
	return strconv.Atoi(f[1])
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(p); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// procState is the state letter of process pid in /proc ("R", "S", "T",
// "Z", ...), "" when it is gone.
func procState(pid int) string {
	if f := statFields(pid); len(f) > 0 {
		return f[0]
	}
	return ""
}

// statFields are the fields of /proc/<pid>/stat after the command name:
// state, parent pid, ... (none when the process is gone).
func statFields(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	return strings.Fields(s)
}
