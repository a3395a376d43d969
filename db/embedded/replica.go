package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// StartStandby makes a streaming standby of c in the empty or missing
// directory dataDir (pg_basebackup -R: standby.signal and primary_conninfo
// pointing at c, with application_name set to the directory's base name) and
// starts it on a free port with opt.Settings; opt.DataDir and opt.Port are
// ignored. c must accept replication connections from 127.0.0.1 (initdb's
// default). A synchronous standby is one that c's synchronous_standby_names
// names ("*": any). The standby is stopped by its own Stop.
func (c *Cluster) StartStandby(ctx context.Context, dataDir string, opt Options) (*Cluster, error) {
	dataDir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("embedded postgres: standby dir: %w", err)
	}
	s := &Cluster{dataDir: dataDir, binDir: c.binDir, log: c.log, cred: c.cred, settings: opt.Settings}
	if opt.Log != nil {
		s.log = opt.Log
	}
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return nil, fmt.Errorf("embedded postgres: creating standby dir: %w", err)
	}
	if err := os.Mkdir(dataDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("embedded postgres: creating standby dir: %w", err)
	}
	if s.cred != nil {
		if err := chownTree(dataDir, s.cred); err != nil {
			return nil, fmt.Errorf("embedded postgres: handing standby dir over: %w", err)
		}
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", c.port, filepath.Base(dataDir))
	if _, err := s.run(ctx, "pg_basebackup", "-D", dataDir, "-d", conninfo, "-R", "-X", "stream", "-c", "fast"); err != nil {
		return nil, fmt.Errorf("embedded postgres: base backup: %w", err)
	}
	if s.port, err = freePort(); err != nil {
		return nil, fmt.Errorf("embedded postgres: picking a port: %w", err)
	}
	if err := s.start(ctx); err != nil {
		s.removeTmpSock()
		return nil, err
	}
	return s, nil
}

// Promote turns a standby into a primary (pg_ctl promote) and waits until it
// accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	if _, err := c.run(ctx, "pg_ctl", "-D", c.dataDir, "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("embedded postgres: promoting: %w", err)
	}
	return nil
}

// Kill sends SIGKILL to the server and to every process it started (a
// crashed host, as far as clients can tell: their connections break and
// nothing is shut down cleanly). StartAgain runs crash recovery.
func (c *Cluster) Kill() error {
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("embedded postgres: reading postmaster.pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return fmt.Errorf("embedded postgres: postmaster.pid: %w", err)
	}
	// Stop the postmaster first so that it forks no backend while its
	// children are listed and killed.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("embedded postgres: stopping %d: %w", pid, err)
	}
	// The stop takes effect asynchronously: wait for it, then kill the
	// children until none is left running (a dead child stays a zombie
	// until the postmaster, stopped, would reap it).
	deadline := time.Now().Add(5 * time.Second)
	for procState(pid) != "T" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
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
		time.Sleep(time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("embedded postgres: killing %d: %w", pid, err)
	}
	c.started = false
	c.removeTmpSock()
	c.log.Info("killed PostgreSQL", zap.String("dir", c.dataDir), zap.Int("pid", pid))
	return nil
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
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		rest := string(b)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// procState is the state letter of process pid in /proc ("R", "S", "T",
// "Z", ...), "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}
