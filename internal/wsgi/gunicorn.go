// Package wsgi runs a Python WSGI application under gunicorn, one process
// group, on a free loopback port: the reference OpenStack services that
// devstack (OpenStack Placement, for benchmarks and tests) and the tests
// (Keystone, package internal/keystonetest) start from Debian's packages.
package wsgi

import (
	"fmt"
	"github.com/metalloc/metalloc/internal/child"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Process is a gunicorn master (and its workers, one process group)
// serving a Python WSGI application: the reference OpenStack services the
// tests start from Debian's packages.
type Process struct {
	name    string // for messages: "OpenStack Placement", "Keystone"
	cmd     *exec.Cmd
	done    chan struct{} // closed when the master has exited
	waitErr error
	once    sync.Once
	log     *zap.Logger
}

// Start starts gunicorn with one sync worker serving app (module:
// callable) from dir on listen, with env, appending its output to logPath.
// One worker: two processes on one sqlite file answer concurrent writes
// with "database is locked".
func Start(name, dir, listen, app, logPath string, env []string, log *zap.Logger) (*Process, error) {
	bin, err := exec.LookPath("gunicorn")
	if err != nil {
		return nil, fmt.Errorf("gunicorn is not installed: apt-get install -y gunicorn python3-gunicorn")
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--workers", "1", "--bind", listen, "--timeout", "300",
		"--graceful-timeout", "5", "--chdir", dir, app)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	g := &Process{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	if err := child.Start(cmd, func(err error) { g.waitErr = err; f.Close(); close(g.done) }); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting gunicorn for %s: %w", name, err)
	}
	return g, nil
}

// Exited returns an error when the master has exited.
func (g *Process) Exited() error {
	select {
	case <-g.done:
		return fmt.Errorf("%s (gunicorn) exited (%v)", g.name, g.waitErr)
	default:
		return nil
	}
}

// Stop terminates the process group: SIGTERM, then SIGKILL after 10 s.
// Calling it again does nothing.
func (g *Process) Stop() {
	g.once.Do(func() {
		pgid := -g.cmd.Process.Pid
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		select {
		case <-g.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(pgid, syscall.SIGKILL)
			select {
			case <-g.done:
			case <-time.After(5 * time.Second):
				g.log.Warn(g.name+" did not exit", zap.Int("pid", g.cmd.Process.Pid))
			}
		}
		// A worker may outlive its master; the group is still ours until
		// its last member exits (killed workers take a moment to go, more
		// on a loaded machine), so wait for the group to be empty.
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pgid, 0) != syscall.ESRCH; {
			if time.Now().After(deadline) {
				g.log.Warn(g.name+" workers did not exit", zap.Int("pgid", -pgid))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// FreePort is a TCP port free on 127.0.0.1 at the moment of the call.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
