// Package e2e holds end-to-end tests: real metalloc-api and metalloc-conductor
// processes on a real PostgreSQL, driven by gophercloud, the Go OpenStack
// client. The binaries are built once per test run.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// binDir holds the freshly built metalloc binaries.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "metalloc-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	for _, c := range []string{"api", "conductor", "placement"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "metalloc-"+c), "./cmd/"+c)
		cmd.Dir = repoRoot()
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building metalloc-"+c+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// repoRoot is the module root (the directory above this file's).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}
