package configs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// binDir holds the four binaries, built once for the package's tests
// (buildBinaries).
var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinaries builds metalloc-api, -conductor, -placement and -manage
// from this checkout (once) and returns their directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "metalloc-configs-bin-"); buildErr != nil {
			return
		}
		for _, c := range []string{"api", "conductor", "placement", "manage"} {
			if out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "metalloc-"+c), "../cmd/"+c).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("building metalloc-%s: %v\n%s", c, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}
