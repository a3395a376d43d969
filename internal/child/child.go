// Package child starts the helper processes that devstack and the test
// starters run (PostgreSQL's tools, gunicorn, metalloc's own daemons) so
// that they never outlive the process that started them.
package child

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Start starts cmd in a process group of its own, with SIGTERM as its
// parent-death signal, so that it stops when this process dies however it
// dies (SIGKILL, a crash: no deferred Stop runs then), and calls exited
// with its Wait error once it has exited. Linux sends the parent-death
// signal when the thread that started the child ends, not the process, so
// Start and Wait run on one goroutine locked to its thread until the child
// has exited.
func Start(cmd *exec.Cmd, exited func(error)) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}
