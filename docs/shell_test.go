package docs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// shell is one bash session that runs blocks one after the other, so that
// what a block sets (BM=..., eval "$(metalloc-manage dev env)", a job in the
// background) holds for the blocks after it, as in a reader's terminal.
type shell struct {
	t    *testing.T
	cmd  *exec.Cmd
	in   *os.File    // bash's standard input: the commands
	done chan string // lines bash writes to fd 3: "__DONE__ <status>"
	dir  string      // scripts and their output
	n    int
	log  *strings.Builder
}

// startShell starts bash in dir with env; Close kills it with everything
// it started (its process group).
func startShell(t *testing.T, dir, scratch string, env []string) *shell {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &shell{t: t, in: inW, done: make(chan string, 1), dir: scratch, log: &strings.Builder{}}
	s.cmd = exec.Command("bash", "--noprofile", "--norc")
	s.cmd.Dir, s.cmd.Env, s.cmd.Stdin = dir, env, inR
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.ExtraFiles = []*os.File{ctlW}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	ctlW.Close()
	go func() {
		sc := bufio.NewScanner(ctlR)
		for sc.Scan() {
			s.done <- sc.Text()
		}
		close(s.done)
	}()
	// curl fails on an HTTP error status (the body is still printed), so
	// that an example answered 4xx or 5xx fails instead of printing it.
	s.send("set -o pipefail\ncurl() { command curl --fail-with-body --max-time 120 \"$@\"; }\n")
	return s
}

func (s *shell) send(cmds string) {
	if _, err := s.in.WriteString(cmds); err != nil {
		s.t.Fatalf("writing to bash: %v; bash said: %s", err, s.log)
	}
}

// run runs script as the next block: its output (standard output and
// error), and its exit status: the first command that fails ends the block
// (as set -e would, with a line "doctest: exit status N at line L: CMD").
func (s *shell) run(script string, timeout time.Duration) (string, int) {
	s.t.Helper()
	s.n++
	file := filepath.Join(s.dir, fmt.Sprintf("block-%03d.sh", s.n))
	out := file + ".out"
	if err := os.WriteFile(file, []byte(script+"\n"), 0o644); err != nil {
		s.t.Fatal(err)
	}
	s.send(fmt.Sprintf(`trap '__rc=$?; echo "doctest: exit status $__rc at line $LINENO: $BASH_COMMAND"; trap - ERR; return $__rc 2>/dev/null' ERR
source %[1]q > %[2]q 2>&1 < /dev/null
__rc=$?; trap - ERR; echo "__DONE__ $__rc" >&3
`, file, out))
	var status int
	select {
	case line, ok := <-s.done:
		if !ok {
			s.t.Fatalf("bash exited while running %s; it said: %s", file, s.log)
		}
		status, _ = strconv.Atoi(strings.TrimPrefix(line, "__DONE__ "))
	case <-time.After(timeout):
		b, _ := os.ReadFile(out)
		s.Close()
		s.t.Fatalf("a block did not finish within %s:\n%s\noutput so far:\n%s", timeout, script, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b), status
}

// Close ends bash and every process it started.
func (s *shell) Close() {
	if s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	s.in.Close()
	_ = s.cmd.Wait()
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
}
