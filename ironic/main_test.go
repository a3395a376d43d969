package ironic

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/devstack"
)

// The package's tests share one Ironic (noauth, two conductors) where they
// only add, change and delete nodes of their own; tests that stop Ironic
// or need another authentication start their own.
var (
	sharedOnce   sync.Once
	sharedIronic *devstack.Ironic
	sharedErr    error
	sharedDir    string
)

// TestMain stops the shared Ironic after the tests, then fails if any
// goroutine they started is still running.
func TestMain(m *testing.M) {
	code := m.Run()
	if sharedIronic != nil {
		if code != 0 {
			fmt.Fprintf(os.Stderr, "shared Ironic logs:\n%s\n", sharedIronic.LogTail(40))
		}
		sharedIronic.Stop()
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// shared returns the package's shared Ironic, starting it on first use.
func shared(t testing.TB) *devstack.Ironic {
	t.Helper()
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "metalloc-ironic-")
		if sharedErr != nil {
			return
		}
		sharedIronic, sharedErr = devstack.StartIronic(context.Background(), devstack.IronicOptions{
			DatabaseURL: os.Getenv("DATABASE_URL"), Dir: sharedDir, Log: zap.NewNop(),
		})
	})
	require.NoError(t, sharedErr, "this test needs Ironic 21.4: apt-get install -y %s", devstack.IronicPackages)
	return sharedIronic
}

// startIronic starts an Ironic of the test's own, stopped at cleanup (its
// logs shown when the test failed).
func startIronic(t *testing.T, opts devstack.IronicOptions) *devstack.Ironic {
	t.Helper()
	opts.DatabaseURL = os.Getenv("DATABASE_URL")
	opts.Dir = t.TempDir()
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	ir, err := devstack.StartIronic(context.Background(), opts)
	require.NoError(t, err, "this test needs Ironic 21.4: apt-get install -y %s", devstack.IronicPackages)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Ironic logs:\n%s", ir.LogTail(40))
		}
		ir.Stop()
	})
	return ir
}
