package devstack

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// procGroup is a process started in its own process group, with the
// children it forks (a gunicorn master and its workers, ironic-api and its
// workers): the reference OpenStack services the tests start from Debian's
// packages.
type procGroup struct {
	name    string // for messages: "OpenStack Placement", "Keystone"
	cmd     *exec.Cmd
	done    chan struct{} // closed when the master has exited
	waitErr error
	once    sync.Once
	log     *zap.Logger
}

// startGunicorn starts gunicorn with one sync worker serving app (module:
// callable) from dir on listen, with env, appending its output to logPath.
// One worker: two processes on one sqlite file answer concurrent writes
// with "database is locked".
func startGunicorn(name, dir, listen, app, logPath string, env []string, log *zap.Logger) (*procGroup, error) {
	bin, err := exec.LookPath("gunicorn")
	if err != nil {
		return nil, fmt.Errorf("gunicorn is not installed: apt-get install -y gunicorn python3-gunicorn")
	}
	return startGroup(name, []string{bin, "--workers", "1", "--bind", listen, "--timeout", "300",
		"--graceful-timeout", "5", "--chdir", dir, app}, env, logPath, log)
}

// startGroup starts argv in a new process group with env (nil: this
// process's), appending its output to logPath.
func startGroup(name string, argv, env []string, logPath string, log *zap.Logger) (*procGroup, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	g := &procGroup{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	go func() { g.waitErr = cmd.Wait(); f.Close(); close(g.done) }()
	return g, nil
}

// exited returns an error when the master has exited.
func (g *procGroup) exited() error {
	select {
	case <-g.done:
		return fmt.Errorf("%s exited (%v)", g.name, g.waitErr)
	default:
		return nil
	}
}

// stop terminates the process group: SIGTERM, then SIGKILL after 10 s.
// Calling it again does nothing.
func (g *procGroup) stop() { g.end(syscall.SIGTERM) }

// kill ends the process group with SIGKILL at once (a crash, as a test
// wants it). Calling it or stop again does nothing.
func (g *procGroup) kill() { g.end(syscall.SIGKILL) }

// end sends sig to the process group, then SIGKILL after 10 s, and waits
// until the group is empty.
func (g *procGroup) end(sig syscall.Signal) {
	g.once.Do(func() {
		pgid := -g.cmd.Process.Pid
		_ = syscall.Kill(pgid, sig)
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
