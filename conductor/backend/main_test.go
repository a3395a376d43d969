package backend

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain stops the shared Ironic (ironic_test.go) after the tests, then
// fails them if any goroutine they started (a worker, a listener, a
// server) is still running.
func TestMain(m *testing.M) {
	code := m.Run()
	stopSharedIronic(code != 0)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}
