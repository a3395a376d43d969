package backend

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they started (a
// worker, a listener, a server) is still running when they end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
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
