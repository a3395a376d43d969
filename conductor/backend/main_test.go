package backend

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

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

// settle processes c as the conductor does: Process again after each
// Waiting, once c.Wait.Retry is up, until it ends otherwise.
func settle(ctx context.Context, b Backend, me int64, c Claimed) (Outcome, error) {
	for {
		out, err := b.Process(ctx, me, &c)
		if err != nil || out != Waiting {
			return out, err
		}
		t := time.NewTimer(c.Wait.Retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return Lost, ctx.Err()
		case <-t.C:
		}
	}
}
