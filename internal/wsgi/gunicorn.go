// Package wsgi runs a Python WSGI application under gunicorn, one process
// group, on a free loopback port: the reference OpenStack services that
// devstack (OpenStack Placement, for benchmarks and tests) and the tests
// (Keystone, package internal/keystonetest) start from Debian's packages.
package wsgi

import (
	"fmt"
	"os/exec"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/internal/child"
)

// Process is a gunicorn master (and its workers, one process group)
// serving a Python WSGI application: the reference OpenStack services the
// tests start from Debian's packages.
type Process struct {
	*child.Group
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
	g, err := child.StartGroup(name+" (gunicorn)", []string{bin, "--workers", "1", "--bind", listen, "--timeout", "300",
		"--graceful-timeout", "5", "--chdir", dir, app}, env, logPath, log)
	if err != nil {
		return nil, err
	}
	return &Process{g}, nil
}
