package child

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Group is a process started in its own process group (Start), with the
// children it forks: a gunicorn master and its workers, ironic-api, an
// ironic-conductor. The reference OpenStack services the tests and
// benchmarks start from Debian's packages are Groups.
type Group struct {
	name    string // for messages: "OpenStack Placement", "ironic-api"
	cmd     *exec.Cmd
	done    chan struct{} // closed when the leader has exited
	waitErr error
	once    sync.Once
	log     *zap.Logger
}

// StartGroup starts argv (argv[0] a path or a name looked up in PATH) as a
// Group with env (nil: this process's), appending its output to logPath.
// name is used in messages.
func StartGroup(name string, argv, env []string, logPath string, log *zap.Logger) (*Group, error) {
	return StartGroupAs(nil, name, argv, env, logPath, log)
}

// StartGroupAs is StartGroup with the leader run as cred's user (nil: as
// ourselves) in the working directory "/", which any user can read: a
// root process starting Patroni, which PostgreSQL's refusal to run as
// root makes run as an unprivileged user (embedded.ServerCredential).
func StartGroupAs(cred *syscall.Credential, name string, argv, env []string, logPath string, log *zap.Logger) (*Group, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	if cred != nil {
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	g := &Group{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	if err := Start(cmd, func(err error) { g.waitErr = err; f.Close(); close(g.done) }); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return g, nil
}

// Pid is the leader's process id (the process group's id).
func (g *Group) Pid() int { return g.cmd.Process.Pid }

// Exited returns an error when the leader has exited.
func (g *Group) Exited() error {
	select {
	case <-g.done:
		return fmt.Errorf("%s exited (%v)", g.name, g.waitErr)
	default:
		return nil
	}
}

// Stop terminates the process group: SIGTERM, then SIGKILL after 10 s,
// and waits until the group is empty. Calling it or Kill again does
// nothing.
func (g *Group) Stop() { g.end(syscall.SIGTERM) }

// Kill ends the process group with SIGKILL at once (a crash, as a test
// wants it) and waits until the group is empty. Calling it or Stop again
// does nothing.
func (g *Group) Kill() { g.end(syscall.SIGKILL) }

// end sends sig to the process group, then SIGKILL after 10 s, and waits
// until the group is empty.
func (g *Group) end(sig syscall.Signal) {
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
		// A child may outlive the leader; the group is still ours until
		// its last member exits (killed workers take a moment to go, more
		// on a loaded machine), so wait for the group to be empty.
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pgid, 0) != syscall.ESRCH; {
			if time.Now().After(deadline) {
				g.log.Warn(g.name+" children did not exit", zap.Int("pgid", -pgid))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
