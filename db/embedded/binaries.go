package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// serverBinaries are the programs a usable bin directory must contain.
var serverBinaries = []string{"initdb", "pg_ctl", "postgres"}

// EnsureBinaries returns the directory holding the PostgreSQL server programs
// (initdb, pg_ctl, postgres). It prefers the highest version under
// /usr/lib/postgresql/*/bin (Debian layout), then the directory of pg_ctl
// found on PATH (symlinks resolved). When none is found and the process runs
// as root, it installs the Debian package postgresql with apt-get (which can
// take a minute; progress is logged to log, which may be nil) and looks
// again. As a non-root user it returns an error asking to install postgresql.
func EnsureBinaries(ctx context.Context, log *zap.Logger) (binDir string, err error) {
	if log == nil {
		log = zap.NewNop()
	}
	if dir, ok := findBinaries(); ok {
		log.Debug("using PostgreSQL binaries", zap.String("dir", dir))
		return dir, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found: " +
			"install the package `postgresql` (e.g. `sudo apt-get install postgresql`)")
	}
	log.Info("installing PostgreSQL from Debian packages")
	if err := installDebian(ctx); err != nil {
		return "", err
	}
	dir, ok := findBinaries()
	if !ok {
		return "", errors.New("PostgreSQL server binaries still not found after installing package postgresql")
	}
	log.Info("installed PostgreSQL", zap.String("dir", dir))
	return dir, nil
}

// findBinaries looks for a directory holding every server binary.
func findBinaries() (string, bool) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Highest version first: compare the version directory numerically so
	// that 10 sorts above 9.6.
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(versionOf(b), versionOf(a))
	})
	for _, d := range dirs {
		if hasBinaries(d) {
			return d, true
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if d := filepath.Dir(p); hasBinaries(d) {
			return d, true
		}
	}
	return "", false
}

func versionOf(binDir string) string { return filepath.Base(filepath.Dir(binDir)) }

// compareVersions compares dotted numeric versions ("15", "9.6").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

func hasBinaries(dir string) bool {
	for _, b := range serverBinaries {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

func installDebian(ctx context.Context) error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return errors.New("PostgreSQL server binaries not found and apt-get is unavailable: install the package `postgresql`")
	}
	steps := [][]string{
		{"apt-get", "update"},
		{"apt-get", "install", "-y", "--no-install-recommends", "postgresql"},
	}
	for _, args := range steps {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("installing PostgreSQL: %s: %w\n%s", strings.Join(args, " "), err, tail(out, 2000))
		}
	}
	return nil
}

// tail returns at most the last n bytes of b, trimmed, starting at a line.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
		if i := slices.Index(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimSpace(string(b))
}
